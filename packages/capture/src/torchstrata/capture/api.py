"""``capture(fn, args, kwargs)``: one call of a Python function into torch-level graphs."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch

from torchstrata.capture.concrete import can_resume
from torchstrata.capture.frame import Frame
from torchstrata.capture.lookahead import find_later_breaks
from torchstrata.capture.program import CaptureProgram, entry_function, frame_locals
from torchstrata.capture.segments import trace_segment
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import Cell
from torchstrata.core import (
    CaptureResult,
    CompileOptions,
    GraphBreak,
    SegmentCompiler,
    active_symbolic_sizes,
)

_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def capture(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None = None,
    options: CompileOptions | None = None,
    *,
    compile_segment: SegmentCompiler | None = None,
) -> CaptureResult:
    """Capture one call ``fn(*args, **kwargs)`` into torch-level graphs.

    ``fn`` is a Python function, a bound method (``model.forward``) or an ``nn.Module``.
    Its bytecode is interpreted symbolically (nothing of it runs): torch calls become
    graph nodes, Python functions and submodule forwards are inlined, parameters and
    buffers become graph inputs. At a construct capture does not support (a graph
    break) the graph ends; the program runs that instruction for real and captures what
    follows when first reached. When the function cannot be split (it has ``try`` or
    ``with`` blocks), the result has no graphs and no program: the caller runs it
    eagerly. Either way ``graph_breaks`` say why and where.

    ``compile_segment`` compiles the graph of a segment the program captures after a
    graph break, on its first run (None: such graphs run in the reference interpreter).

    :return: ``CaptureResult(graphs, guards, graph_breaks, program)`` where
        ``program(compiled_graphs, args, kwargs)`` returns what ``fn`` returns.
    """
    kwargs = dict(kwargs or {})
    target = entry_function(fn)
    if isinstance(fn, torch.nn.Module) and type(fn).__call__ is not torch.nn.Module.__call__:
        return _fallback(f"{type(fn).__name__} overrides __call__, which is not supported", target)
    plain = target.__func__ if inspect.ismethod(target) else target
    code = getattr(plain, "__code__", None)
    if code is None or not hasattr(plain, "__globals__"):
        kind = type(plain).__name__
        return _fallback(
            f"{getattr(plain, '__qualname__', kind)} ({kind}) has no Python bytecode", target
        )
    if code.co_flags & _GENERATOR_FLAGS:
        return _fallback("generators and coroutines are not supported", target)
    try:
        frame_values = frame_locals(target, args, kwargs)
    except TypeError as error:
        return _fallback(f"the call does not match the signature: {error}", target)
    parameter_names = code.co_varnames[: _parameter_count(code)]
    closure_cells = dict(zip(code.co_freevars, plain.__closure__ or ()))

    def start(tracer: Tracer) -> tuple[Frame, int]:
        bound = {name: tracer.wrap(frame_values[name], f"L[{name!r}]") for name in parameter_names}
        closure = [_closure_cell(tracer, closure_cells[name], name) for name in code.co_freevars]
        return Frame(tracer, code, plain.__globals__, "G", bound, closure), 0

    resumable = can_resume(code)
    try:
        first = trace_segment(plain.__globals__, start, resumable)
    except Unsupported as error:
        filename, lineno, instruction = error.location or (
            code.co_filename,
            code.co_firstlineno,
            "",
        )
        reason = error.reason
        if not resumable and error.top_step is not None:
            reason += " (the function has try/with blocks, so it cannot be split: it runs eagerly)"
        return CaptureResult((), (), (GraphBreak(reason, filename, lineno, instruction),), None)
    dynamic = active_symbolic_sizes() is not None  # later segments symbolic where sizes vary
    program = CaptureProgram(
        target, code, plain.__globals__, first, compile_segment, dynamic=dynamic
    )
    if first.graph_break is not None:
        for graph_break in find_later_breaks(plain.__globals__, start, first.steps):
            if graph_break not in program.graph_breaks:
                program.graph_breaks.append(graph_break)
    graphs = (first.graph,) if first.graph is not None else ()
    direct = program.run_direct if program.direct_sources is not None else None
    return CaptureResult(
        graphs,
        first.guards,
        tuple(program.graph_breaks),
        program,
        direct_sources=program.direct_sources,
        direct_program=direct,
    )


def _closure_cell(tracer: Tracer, cell: Any, variable: str) -> Cell:
    """A cell of the captured function (of its free ``variable``), guarded by a name the
    guards hold (:mod:`.closures`)."""

    def origin(namespace: dict[str, Any]) -> Any:
        return cell

    try:
        contents = cell.cell_contents
    except ValueError:  # an empty cell: the name is not bound yet
        return Cell(origin=origin)
    return Cell(pending=(contents, tracer.cell_source(cell, variable), True), origin=origin)


def _parameter_count(code: Any) -> int:
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    return int(count)


def _fallback(reason: str, fn: Any) -> CaptureResult:
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    filename = code.co_filename if code else "<unknown>"
    lineno = code.co_firstlineno if code else 0
    return CaptureResult((), (), (GraphBreak(reason, filename, lineno),), None)
