"""Graph passes and the pass manager that orders, times, verifies and validates them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar

import attrs
import torch

from torchstrata.core.graph import Graph
from torchstrata.core.interpret import InterpreterError, interpret, random_inputs
from torchstrata.core.logs import artifact_logger
from torchstrata.core.verify import verify

passes_log = artifact_logger(__name__, "passes")

#: Called after each pass with its record and the graph it returned (a debug dump).
PassObserver = Callable[["PassRecord", Graph], None]


class GraphPass:
    """A named graph-to-graph rewrite. Subclasses set ``name`` and implement ``__call__``.

    ``before``/``after`` name passes this one must run before or after (when present).
    A pass returns a new graph; it never edits its input.
    """

    name: ClassVar[str] = ""
    before: ClassVar[tuple[str, ...]] = ()
    after: ClassVar[tuple[str, ...]] = ()

    def __call__(self, graph: Graph) -> Graph:
        raise NotImplementedError


class PassOrderError(ValueError):
    """Passes declare a cyclic or duplicate order."""


class PassValidationError(AssertionError):
    """A pass changed the results of the graph it rewrote; the message names it."""


@attrs.frozen
class PassRecord:
    """What one pass did: its provenance record."""

    name: str
    stage: str
    seconds: float
    nodes_before: int
    nodes_after: int

    def __str__(self) -> str:
        where = f" ({self.stage})" if self.stage else ""
        return (
            f"{self.name}{where}: {self.seconds * 1000:.2f} ms, "
            f"{self.nodes_before} -> {self.nodes_after} nodes"
        )


def order_passes(passes: Sequence[GraphPass]) -> list[GraphPass]:
    """Stable topological order by ``before``/``after``; duplicate names are an error."""
    by_name: dict[str, GraphPass] = {}
    for graph_pass in passes:
        if not graph_pass.name:
            raise PassOrderError(f"{type(graph_pass).__name__} has no name")
        if graph_pass.name in by_name:
            raise PassOrderError(f"two passes are named {graph_pass.name!r}")
        by_name[graph_pass.name] = graph_pass
    after: dict[str, set[str]] = {name: set() for name in by_name}
    for graph_pass in passes:
        after[graph_pass.name] |= {name for name in graph_pass.after if name in by_name}
        for name in graph_pass.before:
            if name in by_name:
                after[name].add(graph_pass.name)
    ordered: list[GraphPass] = []
    done: set[str] = set()
    while len(ordered) < len(passes):
        ready = [p for p in passes if p.name not in done and after[p.name] <= done]
        if not ready:
            cycle = sorted(set(by_name) - done)
            raise PassOrderError(f"passes {cycle} declare a cyclic order")
        ordered.append(ready[0])
        done.add(ready[0].name)
    return ordered


class PassManager:
    """Runs passes in order; verifies between them (``debug``) and checks each one by
    executing its input and output graphs on random inputs (``validate``).

    Each pass's :class:`PassRecord` goes to ``records``, to the ``passes`` log artifact,
    and to ``observer`` (with the graph the pass returned) when one is given."""

    def __init__(
        self,
        passes: Iterable[GraphPass],
        *,
        debug: bool = False,
        validate: bool = False,
        blocked: Iterable[str] = (),
        observer: PassObserver | None = None,
    ) -> None:
        blocked = set(blocked)
        self.passes = order_passes([p for p in passes if p.name not in blocked])
        self.debug = debug
        self.validate = validate
        self.records: list[PassRecord] = []
        self.observer = observer

    def run(self, graph: Graph, stage: str = "") -> Graph:
        """Apply every pass to ``graph`` and return the result."""
        for graph_pass in self.passes:
            start = time.perf_counter()
            result = graph_pass(graph)
            seconds = time.perf_counter() - start
            if not isinstance(result, Graph):
                raise TypeError(
                    f"pass {graph_pass.name!r} returned {type(result).__name__}, not a Graph"
                )
            if self.debug:
                verify(result)
            if self.validate:
                validate_pass(graph_pass.name, graph, result)
            record = PassRecord(
                graph_pass.name, stage, seconds, len(graph.nodes), len(result.nodes)
            )
            self.records.append(record)
            passes_log.debug("%s", record)
            if self.observer is not None:
                self.observer(record, result)
            graph = result
        return graph


def validate_pass(name: str, before: Graph, after: Graph, *, trials: int = 2) -> None:
    """Raise :class:`PassValidationError` if ``after`` computes other values than ``before``."""
    for seed in range(trials):
        inputs = random_inputs(before, seed=seed)
        try:
            expected = interpret(before, *inputs)
        except InterpreterError:
            # random inputs outside the graph's domain (an index out of bounds for a
            # gather): the graph defines no result to compare with
            continue
        actual = interpret(after, *inputs)
        if len(expected) != len(actual):
            raise PassValidationError(f"pass {name!r} changed the number of outputs")
        for index, (want, got) in enumerate(zip(expected, actual, strict=True)):
            try:
                torch.testing.assert_close(got, want, equal_nan=True)
            except AssertionError as error:
                raise PassValidationError(
                    f"pass {name!r} changed output {index}: {error}"
                ) from None
