"""``capture(fn, args, kwargs)``: one call of a Python function into a torch-level graph."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch

from torchstrata.capture.frame import Frame
from torchstrata.capture.program import entry_function, flatten_result, frame_locals, make_program
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import Cell
from torchstrata.core import CaptureResult, CompileOptions, GraphBreak

_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def capture(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None = None,
    options: CompileOptions | None = None,
) -> CaptureResult:
    """Capture one call ``fn(*args, **kwargs)`` into a torch-level graph.

    ``fn`` is a Python function, a bound method (``model.forward``) or an ``nn.Module``.
    Its bytecode is interpreted symbolically (nothing of it runs): torch calls become
    graph nodes, Python functions and submodule forwards are inlined, parameters and
    buffers become graph inputs. On a construct capture does not support, the result
    has no graphs and no program, and one :class:`~torchstrata.core.GraphBreak` saying
    why and where: the caller runs the function eagerly.

    :return: ``CaptureResult(graphs=(graph,), guards, (), program)`` where
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
    tracer = Tracer(plain.__globals__)
    parameter_names = code.co_varnames[: _parameter_count(code)]
    try:
        bound = {name: tracer.wrap(frame_values[name], f"L[{name!r}]") for name in parameter_names}
        # Closure values are specialised on without guards (the runtime's L has no free
        # variables); tensors in closures are still fetched and guarded as L['name'].
        closure = [
            Cell(pending=(frame_values[name], f"L[{name!r}]", False))
            if name in frame_values
            else Cell()
            for name in code.co_freevars
        ]
        frame = Frame(tracer, code, plain.__globals__, "G", bound, closure)
        spec, outputs = flatten_result(frame.run())
    except Unsupported as error:
        filename, lineno, instruction = error.location or (
            code.co_filename,
            code.co_firstlineno,
            "",
        )
        graph_break = GraphBreak(error.reason, filename, lineno, instruction)
        return CaptureResult((), tracer.guards, (graph_break,), None)
    graph = tracer.builder.build(outputs)
    program = make_program(target, plain.__globals__, tracer.input_sources, spec)
    return CaptureResult((graph,), tracer.guards, (), program)


def _parameter_count(code: Any) -> int:
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    return int(count)


def _fallback(reason: str, fn: Any) -> CaptureResult:
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    filename = code.co_filename if code else "<unknown>"
    lineno = code.co_firstlineno if code else 0
    return CaptureResult((), (), (GraphBreak(reason, filename, lineno),), None)
