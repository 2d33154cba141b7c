"""Segments: the straight-line pieces a function splits into at graph breaks.

A segment starts at an instruction of the top-level frame with a known state (the call's
arguments, or the real state after a graph break), is traced into one graph, and ends
at a ``return`` or just before the instruction that broke. On every call it runs its
graph and rebuilds what comes next: the return value, or the real frame state at the
break (see :mod:`.rebuild`).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from torchstrata.capture.concrete import Returned, State
from torchstrata.capture.frame import Frame, Paused
from torchstrata.capture.guard_check import GuardCheck, segment_check
from torchstrata.capture.rebuild import Rebuilder
from torchstrata.capture.side_effects import SideEffects
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import Var
from torchstrata.core import Graph, GraphBreak, Guard

#: Sets up a fresh frame over a tracer: (frame, index of the first instruction).
Starter = Callable[[Tracer], tuple[Frame, int]]


@attrs.define(eq=False)
class Segment:
    """One traced piece of the top-level frame (see the module docstring)."""

    graph: Graph | None
    guards: tuple[Guard, ...]
    input_sources: tuple[str, ...]
    rebuilder: Rebuilder
    frame: Frame
    returned: Var | None
    paused: Paused | None
    graph_break: GraphBreak | None
    fetch: Callable[..., tuple[Any, ...]]
    check: GuardCheck | None = None
    #: Mutations of Python state the segment made, replayed after its graph.
    side_effects: SideEffects | None = None
    #: The closure cells its sources name, by name (:mod:`.closures`): bound wherever
    #: those sources are read.
    cells: dict[str, types.CellType] = attrs.field(factory=dict)

    @property
    def is_empty(self) -> bool:
        """It stopped before its first instruction (that one must run for real)."""
        return self.paused is not None and self.graph is None and self.steps == 0

    steps: int = 0

    def run(self, graph_fn: Callable[..., Any] | None, namespace: dict[str, Any]) -> Any:
        """Run the graph on inputs read from ``namespace`` and rebuild what follows:
        :class:`Returned` or the real :class:`State` at the break."""
        outputs: Sequence[Any] = ()
        if self.cells:  # sources read while rebuilding may name closure cells
            namespace = {**namespace, **self.cells}
        if self.graph is not None:
            assert graph_fn is not None
            outputs = graph_fn(
                *self.fetch(namespace["L"], namespace["S"], namespace["C"], namespace["G"])
            )
        memo: dict[int, Any] = {}
        rebuild = self.rebuilder
        writes: list[Callable[[], object]] = []
        if self.side_effects:
            # every value is built before the first write (a source read while building
            # sees the state before the segment's writes, as the trace did)
            writes = self.side_effects.prepare(rebuild, outputs, namespace, memo)
        result: Returned | State
        if self.paused is None:
            result = Returned(rebuild.build(self.returned, outputs, namespace, memo))  # type: ignore[arg-type]
        else:
            result = self._state(outputs, namespace, memo)
        for write in writes:
            write()
        return result

    def _state(self, outputs: Sequence[Any], namespace: dict[str, Any], memo: dict) -> State:
        rebuild = self.rebuilder
        frame = self.frame
        assert self.paused is not None
        cells = {
            name: rebuild.build_cell(cell, outputs, namespace, memo)
            for name, cell in frame.cells.items()
        }
        return State(
            self.paused.index,
            {
                name: rebuild.build(var, outputs, namespace, memo)
                for name, var in frame.locals.items()
            },
            [rebuild.build(var, outputs, namespace, memo) for var in frame.stack],
            cells,
            frame.kw_names,
        )


def trace_segment(globals_: dict[str, Any], start: Starter, resumable: bool) -> Segment:
    """Trace from ``start``; on a graph break (when ``resumable``) trace again up to the
    breaking instruction and end the segment there. Raises :class:`Unsupported` when the
    break cannot be resumed from."""
    tracer = Tracer(globals_)
    frame, index = start(tracer)
    graph_break = None
    steps = 0
    try:
        result = frame.run(index)
    except Unsupported as error:
        if not resumable or error.top_step is None:
            raise
        filename, lineno, text = error.location or (frame.code.co_filename, frame.lineno, "")
        graph_break = GraphBreak(error.reason, filename, lineno, text)
        steps = error.top_step
        tracer = Tracer(globals_)
        frame, index = start(tracer)
        result = frame.run(index, stop_step=steps)
        assert isinstance(result, Paused), "replaying a trace must stop where it broke"
    rebuilder = Rebuilder(tracer.int_symbols)
    if isinstance(result, Paused):
        for item in (*frame.locals.values(), *frame.stack, *frame.cells.values()):
            rebuilder.collect(item)
    else:
        rebuilder.collect(result)
    effects = tracer.side_effects
    effects.collect(rebuilder)
    outputs = list(rebuilder.outputs)
    outputs += [var.node for var in tracer.mutated.values() if var.node not in outputs]
    graph = tracer.builder.build(outputs) if outputs else None
    sources = tuple(tracer.input_sources) if graph is not None else ()
    text = "lambda L, S, C, G: (" + "".join(f"{source}, " for source in sources) + ")"
    cells = dict(tracer.cells)  # the names of closure cells that sources read
    fetch = eval(compile(text, "<torchstrata capture inputs>", "eval"), dict(cells))
    return Segment(
        graph,
        tracer.guards,
        sources,
        rebuilder,
        frame,
        None if isinstance(result, Paused) else result,
        result if isinstance(result, Paused) else None,
        graph_break,
        fetch,
        steps=steps,
        side_effects=effects if effects else None,
        cells=cells,
    )


def with_check(segment: Segment) -> Segment:
    """The segment with its guards compiled (segments after the first check their own,
    and the global state they were traced under)."""
    segment.check = segment_check(segment.guards)
    return segment
