"""Symbolic sizes meeting plain Python (decision 0200): where a ``torch.SymInt`` would
turn into a value that no longer says it depends on a size (a string, a Python value
handed back to the caller or stored), capture specialises it first: ``int(s)`` records
the guard ``Eq(s, 16)`` in the ShapeEnv, so the trace stays correct, only less general.
"""

from __future__ import annotations

import builtins
import functools
import math
import operator
from collections.abc import Callable
from typing import Any

import torch

from torchstrata.core import specialise_sizes

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)

#: Functions that compute with symbolic scalars (their results stay symbolic, decisions
#: on them are guarded by the ShapeEnv): folded without specialising.
SYMBOLIC_SAFE: frozenset[Callable[..., Any]] = frozenset(
    [
        *(getattr(operator, name) for name in (
            "add", "sub", "mul", "floordiv", "mod", "truediv", "pow", "neg", "pos", "abs",
            "lt", "le", "gt", "ge", "eq", "ne", "iadd", "isub", "imul", "ifloordiv", "imod",
            "index", "not_", "truth",
        )),
        builtins.int, builtins.bool, builtins.float, builtins.min, builtins.max,
        builtins.abs, builtins.divmod, math.floor, math.ceil, torch.sym_sqrt, torch.sym_float,
    ]
)  # fmt: skip


def has_symbolic(value: Any) -> bool:
    """Whether ``value`` (or an item of a list, tuple, dict or slice) is symbolic."""
    if isinstance(value, _SYMBOLIC):
        return True
    if isinstance(value, list | tuple):
        return any(has_symbolic(item) for item in value)
    if isinstance(value, dict):
        return any(has_symbolic(item) for item in value.values())
    if isinstance(value, slice):
        return has_symbolic((value.start, value.stop, value.step))
    return False


#: Functions of a number whose ``torch`` counterpart keeps a symbolic size symbolic:
#: ``math.sqrt(q.shape[-1])`` is ``torch.sym_sqrt`` of it, a ``SymFloat`` that a lowering
#: for many sizes computes from the size (decision 0500), not a guard ``Eq(s2, 16)``.
SYMBOLIC_COUNTERPARTS: dict[Callable[..., Any], Callable[..., Any]] = {
    math.sqrt: torch.sym_sqrt,
    builtins.float: torch.sym_float,  # ``float(n)``: ``ToFloat(s0)`` (was ``Eq(s0, 16)``)
}


def symbolic_counterpart(fn: Callable[..., Any], values: tuple[Any, ...]) -> Callable[..., Any]:
    """``fn``, or the counterpart that keeps its symbolic argument symbolic
    (:data:`SYMBOLIC_COUNTERPARTS`) where ``values`` is one ``SymInt``/``SymFloat``."""
    plain = fn
    if isinstance(fn, functools.partial) and not fn.args and not fn.keywords:
        plain = fn.func  # a builtin called with no keywords (``python_builtins``)
    counterpart = SYMBOLIC_COUNTERPARTS.get(plain)
    if counterpart is None or len(values) != 1:
        return fn
    (value,) = values
    return counterpart if isinstance(value, torch.SymInt | torch.SymFloat) else fn


def fold_arguments(fn: Callable[..., Any], values: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments to fold ``fn`` on: as they are for symbolic-safe functions on
    numbers, specialised otherwise (``str(n)``, ``"%d" % n``, ``f(n)``)."""
    if not has_symbolic(values):
        return values
    plain = fn.func if isinstance(fn, functools.partial) else fn
    if plain in (operator.getitem, builtins.len) and not has_symbolic(values[1:]):
        return values  # an item of (or the length of) a shape: the size itself
    numbers = all(not isinstance(v, str | bytes | list | tuple | dict) for v in values)
    if plain in SYMBOLIC_SAFE and numbers:
        return values
    return tuple(specialise_sizes(value) for value in values)
