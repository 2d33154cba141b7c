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
        builtins.abs, builtins.divmod, math.floor, math.ceil,
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
