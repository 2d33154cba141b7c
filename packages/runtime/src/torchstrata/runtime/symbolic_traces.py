"""The symbolic autograd traces of one graph with symbolic sizes, and a size's lowering
from them (decisions 0220, 0256): shared by the runtime's symbolic entries
(:class:`~torchstrata.runtime.dynamic_shapes.SizeSpecialisedRunner`) and the Dynamo
backend's per-size graphs.

A size is served by the first trace whose conditions it meets. Sizes outside every
trace's conditions get a trace of their own, taken at their sizes, unless a violated
condition is an equality (the trace specialised a size: another trace would too) or
``max_traces`` traces were tried; otherwise the size is traced on its own (its
``AotResult`` None), never served by a trace it does not meet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from torchstrata.core import AotResult, Graph, SymbolicAot, artifact_logger
from torchstrata.core.options import SHARED_DECOMPOSITION_FROM
from torchstrata.runtime.artifacts import SizedAot
from torchstrata.runtime.symbolic_decomp import SharedDecomposition

dynamic_log = artifact_logger(__name__, "dynamic")

T = TypeVar("T")


class SymbolicTraces:
    """The symbolic traces made of one graph, up to ``max_traces``.

    :param trace: traces the graph symbolically, its decisions on sizes taken for the
        given sizes (None: the graph's own hints); None or an error: no trace.
    :param shared_from: the size of a trace (1: the first) from which on its sizes take
        their prims graphs from its one decomposition (the compile option
        ``shared_decomposition_from``; decisions 0280, 0281).
    """

    def __init__(
        self,
        trace: Callable[[Mapping[str, int] | None], SymbolicAot | None],
        max_traces: int = 4,
        shared_from: int = SHARED_DECOMPOSITION_FROM,
    ) -> None:
        self._trace = trace
        #: the size of a trace from which on its sizes share its decomposition
        self.shared_from = shared_from
        #: sizes served, by ``id`` of the trace
        self._served: dict[int, int] = {}
        self.traces: list[SymbolicAot] = []
        self.max_traces = max_traces
        self.attempts = 0
        #: the shared decomposition of each trace partitioned once, by ``id`` of the
        #: trace (``traces`` keeps each alive)
        self._shared: dict[int, SharedDecomposition] = {}

    def add(self, hints: Mapping[str, int] | None) -> SymbolicAot | None:
        """A new trace for ``hints`` (kept when there is one)."""
        self.attempts += 1
        try:
            traced = self._trace(hints)
        except Exception as error:  # noqa: BLE001 - no symbolic trace: sizes traced on their own
            dynamic_log.debug("no symbolic trace (%s: %s)", type(error).__name__, error)
            return None
        if traced is not None:
            self.traces.append(traced)
        return traced

    def at(self, values: Mapping[str, int]) -> AotResult | SizedAot | None:
        """The ``AotResult`` at ``values`` of a trace whose conditions they meet (see the
        module docstring), with the trace's shared decomposition where the stage
        partitioned it once (:class:`SizedAot`, decision 0280); None when this size is to
        be traced on its own."""
        for traced in self.traces:
            if not traced.violated(values):
                return self._sized(traced, values)
        outside = "; ".join(traced.violated(values) for traced in self.traces)
        if (
            self.traces
            and self.attempts < self.max_traces
            and not any(traced.specialised(values) for traced in self.traces)
        ):
            dynamic_log.debug("sizes %s violate %s: a symbolic trace for them", values, outside)
            added = self.add(values)
            if added is not None and not added.violated(values):
                return self._sized(added, values)
        dynamic_log.debug(
            "tracing sizes %s on their own: they violate %s, which the symbolic trace relied on",
            values,
            outside,
        )
        return None

    def trace_for(
        self, values: Mapping[str, int]
    ) -> tuple[SymbolicAot, SharedDecomposition] | None:
        """The first trace whose conditions ``values`` meet and that the stage
        partitioned once, with its shared decomposition (made here when it has none
        yet); None where there is none. Counts no size served."""
        for traced in self.traces:
            if traced.result is not None and not traced.violated(values):
                shared = self._shared.get(id(traced))
                if shared is None:
                    shared = self._shared[id(traced)] = SharedDecomposition(traced.result)
                return traced, shared
        return None

    def _sized(self, traced: SymbolicAot, values: Mapping[str, int]) -> AotResult | SizedAot:
        aot = traced.at(values)
        served = self._served[id(traced)] = self._served.get(id(traced), 0) + 1
        if traced.result is None or served < self.shared_from:
            return aot
        shared = self._shared.get(id(traced))
        if shared is None:
            shared = self._shared[id(traced)] = SharedDecomposition(traced.result)
        return SizedAot(aot, dict(values), shared)


def lower_from_traces(
    lower: Callable[..., T],
    graph: Graph,
    aot_at: Callable[[], AotResult | SizedAot | None],
    values: Mapping[str, Any],
) -> T:
    """``lower(graph, aot)`` with ``aot`` asking ``aot_at`` (only where the lowering needs
    an autograd result); a lowering from a trace's result that fails is retried from the
    size's own trace, ``lower(graph)``."""
    used: list[AotResult | SizedAot] = []

    def traced() -> AotResult | SizedAot | None:
        aot = aot_at()
        used.extend([aot] if aot is not None else [])
        return aot

    try:
        return lower(graph, traced)
    except Exception as error:
        if not used:
            raise
        dynamic_log.debug(
            "lowering sizes %s from the symbolic trace failed (%s: %s): tracing them on their own",
            dict(values),
            type(error).__name__,
            error,
        )
        return lower(graph)
