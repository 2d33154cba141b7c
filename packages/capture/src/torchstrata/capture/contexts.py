"""``with`` blocks over grad mode and autocast, traced into the graph.

Entering and leaving regions is here; what a region does to the ops in it is in
:mod:`.modes`. ``torch.no_grad()`` regions detach the tensors that require grad before each op reads
them (so results do not require grad, as in eager); ``torch.autocast`` regions cast the
floating arguments of each op as autocast does in eager (see :mod:`.autocast`).
``torch.enable_grad()``, ``torch.inference_mode()`` (as ``no_grad``),
``contextlib.nullcontext()`` and ``torch.autograd.profiler.record_function`` (a profiler
range: no effect on the graph) are accepted too.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import (
    ConstVar,
    ContextExitVar,
    ContextVar,
    NotConstant,
    Var,
    python_value,
)

#: Context manager classes a ``with`` may enter at capture time.
CONTEXT_MANAGERS = (
    torch.no_grad, torch.enable_grad, torch.autocast, torch.amp.autocast, contextlib.nullcontext,
    torch.inference_mode, torch.autograd.profiler.record_function,
)  # fmt: skip


def make_context(cls: Any, args: Sequence[Var], kwargs: Mapping[str, Var]) -> ContextVar:
    """``cls(*args, **kwargs)`` for a class of :data:`CONTEXT_MANAGERS`."""
    try:
        values = [python_value(arg) for arg in args]
        keywords = {key: python_value(value) for key, value in kwargs.items()}
    except NotConstant:
        raise Unsupported(f"{cls.__name__}() with non-constant arguments") from None
    context = _context(cls, values, keywords)
    context.factory = functools.partial(cls, *values, **keywords)
    return context


def _context(cls: Any, values: list[Any], keywords: dict[str, Any]) -> ContextVar:
    keywords = dict(keywords)
    if cls in (torch.autocast, torch.amp.autocast):
        device = keywords.pop("device_type", values[0] if values else None)
        dtype = keywords.get("dtype", values[1] if len(values) > 1 else None)
        enabled = keywords.get("enabled", values[2] if len(values) > 2 else True)
        if dtype is None:
            dtype = torch.get_autocast_dtype(device)
        return ContextVar(("autocast", (device, dtype) if enabled else None))
    if cls is torch.no_grad:
        return ContextVar(("grad", False))
    if cls is torch.enable_grad:
        return ContextVar(("grad", True))
    if cls is torch.inference_mode:  # as no_grad for the graph: results do not require grad
        enabled = keywords.get("mode", values[0] if values else True)
        return ContextVar(("grad", False) if enabled else ("none", None))
    # nullcontext; record_function: a profiler range, no effect on what the graph computes
    return ContextVar(("none", None))


def enter(tracer: Tracer, context: ContextVar) -> Var:
    """Enter ``context``; returns what ``__enter__`` returns."""
    if context.entered:
        raise Unsupported("entering a context manager twice is not supported")
    context.entered = True
    tracer.modes.append(context.manager)
    return ConstVar(None)


def exit_context(tracer: Tracer, exit_var: ContextExitVar) -> Var:
    """Leave the context of ``exit_var``."""
    if not tracer.modes or tracer.modes[-1] is not exit_var.context.manager:
        raise Unsupported("leaving context managers out of order is not supported")
    tracer.modes.pop()
    return ConstVar(False)
