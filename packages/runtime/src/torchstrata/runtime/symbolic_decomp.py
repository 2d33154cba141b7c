"""One decomposition of a symbolic trace's partitioned graphs for every size (decision
0280).

The autograd stage partitions a symbolic trace once (``SymbolicAot.result``, its sizes
symbolic). Its forward and backward graphs go through the decomp stage once each, and
each size takes the prims graph with its sizes made static (``concretize_graph``) instead
of decomposing its own ATen graph.

Each graph is decomposed in a ``ShapeEnv`` of its own (``rebind_graph``: the same
symbols and hints). A decision of the decomposition on sizes compares ``SymInt`` values,
which records the condition there: those are the decomposition's conditions, and a size
that violates one is decomposed on its own (a debug line names the condition). So is
every size where the shared decomposition does not apply: a contract that lays out the
graph's inputs otherwise (a backward built for the strides the compiled forward returns
its saved values in), a graph the ``post_aot`` passes changed, a decomposition that
failed on symbolic sizes. Never a graph made for
other sizes than the call's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from torchstrata.core import (
    AotResult,
    Graph,
    GraphContract,
    SymbolicSizes,
    artifact_logger,
    concretize_graph,
    rebind_graph,
    symbolic_scope,
)

dynamic_log = artifact_logger(__name__, "dynamic")

#: Decomposes an ATen graph under a contract (the pipeline's decomp stage).
Decompose = Callable[[Graph, GraphContract], Graph | None]

#: The prims graph of one size's ATen graph under a contract, from a shared
#: decomposition; None: the graph is to be decomposed on its own.
SharedPrims = Callable[[GraphContract], Graph | None]


@attrs.frozen
class _Decomposed:
    prims: Graph
    #: the sympy conditions on sizes the decomposition relied on
    conditions: tuple[Any, ...]


class SharedDecomposition:
    """The prims graphs of one symbolic ``AotResult`` (``SymbolicAot.result``), each
    decomposed once per contract at its first use, and their size conditions.

    :param result: the autograd stage's partition of a symbolic trace, sizes symbolic.
    """

    def __init__(self, result: AotResult) -> None:
        self.result = result
        self._made: dict[tuple[str, GraphContract], _Decomposed | None] = {}
        #: how many times a graph of ``result`` went through the decomp stage
        self.decompositions = 0

    def at(
        self,
        which: str,
        values: Mapping[str, int],
        contract: GraphContract,
        decompose: Decompose,
    ) -> Graph | None:
        """The prims graph of ``result``'s ``which`` graph (``"forward"`` or
        ``"backward"``) under ``contract``, its sizes ``values``; None where this size is
        to be decomposed on its own (see the module docstring)."""
        graph = self.result.forward if which == "forward" else self.result.backward
        if graph is None:
            return None
        if any(layout is not None for layout in contract.input_layouts):
            dynamic_log.debug(
                "sizes %s: the %s is decomposed on its own (its contract lays out inputs)",
                dict(values),
                which,
            )
            return None
        contract = attrs.evolve(contract, input_layouts=())
        key = (which, contract)
        if key not in self._made:
            self._made[key] = self._decompose(graph, contract, decompose, which)
        made = self._made[key]
        if made is None:
            return None
        violated = _violated(made.conditions, values)
        if violated is not None:
            dynamic_log.debug(
                "sizes %s: the %s is decomposed on its own: they violate %s, which its "
                "symbolic decomposition relied on",
                dict(values),
                which,
                violated,
            )
            return None
        return concretize_graph(made.prims, values)

    def symbolic(
        self,
        which: str,
        contract: GraphContract,
        decompose: Decompose,
        made_from: Callable[[Graph], Graph] | None = None,
    ) -> tuple[Graph, tuple[Any, ...]] | None:
        """The prims graph of ``result``'s ``which`` graph under ``contract`` with its
        sizes symbolic, and the sympy conditions its decomposition relied on; None where
        there is none (a contract that lays out inputs, a failed decomposition).
        ``made_from``: decompose ``made_from(graph)`` instead where it is another graph
        (kept apart from the graph's own; one function per ``which`` for a
        decomposition's life)."""
        graph = self.result.forward if which == "forward" else self.result.backward
        if graph is None or any(layout is not None for layout in contract.input_layouts):
            return None
        other = graph if made_from is None else made_from(graph)
        if other is not graph:
            graph, which = other, f"{which} (made)"
        key = (which, attrs.evolve(contract, input_layouts=()))
        if key not in self._made:
            self._made[key] = self._decompose(graph, key[1], decompose, which)
        made = self._made[key]
        return None if made is None else (made.prims, made.conditions)

    def _decompose(
        self, graph: Graph, contract: GraphContract, decompose: Decompose, which: str
    ) -> _Decomposed | None:
        # a ShapeEnv of the decomposition's own: its guards are exactly the conditions
        # it relied on, and a size it specialises (a replacement ``s0 -> 16``) cannot
        # change the trace's sizes, which every later size is made static from
        sizes = SymbolicSizes({})
        self.decompositions += 1
        try:
            rebound = rebind_graph(graph, sizes)
            with symbolic_scope(sizes):
                prims = decompose(rebound, contract)
        except Exception as error:  # noqa: BLE001 - each size is decomposed on its own
            dynamic_log.debug(
                "the symbolic %s is decomposed per size: its decomposition failed (%s: %s)",
                which,
                type(error).__name__,
                error,
            )
            return None
        if prims is None:
            return None
        conditions = sizes.guard_exprs()
        dynamic_log.debug(
            "one decomposition of the symbolic %s serves every size; it relied on %d size "
            "conditions: %s",
            which,
            len(conditions),
            ", ".join(map(str, conditions)),
        )
        return _Decomposed(prims, conditions)


def _violated(conditions: tuple[Any, ...], values: Mapping[str, int]) -> Any:
    """The first of ``conditions`` that ``values`` make false or give no value for; None
    when every one holds."""
    import sympy  # type: ignore[import-untyped]

    for expr in conditions:
        if any(s.name not in values for s in expr.free_symbols):
            return expr
        if not bool(expr.xreplace({s: sympy.Integer(values[s.name]) for s in expr.free_symbols})):
            return expr
    return None
