"""Floor divisions and modulos of sizes simplified where every size decides them (0480).

The symbolic decomposition spells a roll's shift ``1 % n`` as ``Mod(1, s0)``, and what it
derives from it nests that form (``Mod(-(s0 - Mod(1, s0))*floor(-Mod(1, s0)/(s0 -
Mod(1, s0))) - Mod(1, s0), s0 - Mod(1, s0))``, which is ``s0 - 2``). Every symbolic size
is an integer of at least 2 (decision 0200), so ``Mod(1, s0)`` is 1 at every size the
lowering can serve: kept, it printed into kernels as branch-free floored forms and made
conditions such as ``Mod(1, s0) + 1 < s0`` that say ``s0 > 2``.

:func:`simplified_sizes` rewrites, innermost first, ``Mod(a, b)`` (sympy's, torch's
``Mod``/``PythonMod``) as ``a`` where ``0 <= a < b`` holds at every size, and ``floor(a /
b)`` (or torch's ``FloorDiv(a, b)``) as ``0`` where ``0 <= a < b`` and as ``-1`` where
``-b <= a < 0`` (``b > 0``). Each test is decided for every size, never at the hint, so
the result equals the expression at every size: nothing is recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

#: torch's names (``torch.utils._sympy.functions``) of a floored modulo and quotient
_MODULOS = frozenset({"Mod", "PythonMod"})
_QUOTIENTS = frozenset({"FloorDiv"})

#: an expression -> its simplified form (expressions repeat across a lowering's sizes)
_SIMPLIFIED: dict[Any, Any] = {}


def simplified_sizes(expr: Any, always: Callable[[Any], bool]) -> Any:
    """``expr`` (sympy, over size symbols) with each ``Mod`` and floor division that
    ``always`` (whether a sympy relation holds at every size) decides replaced by its
    value (see the module docstring); ``expr`` itself where none is."""
    found = _SIMPLIFIED.get(expr)
    if found is None:
        found = expr
        if any(_decidable(node) for node in _walk(expr)):
            found = expr.replace(_decidable, lambda e: _value(e, always))
        _SIMPLIFIED[expr] = found
    return found


def _walk(expr: Any) -> Iterator[Any]:
    yield expr
    for arg in getattr(expr, "args", ()):
        yield from _walk(arg)


def _decidable(expr: Any) -> bool:
    name = type(expr).__name__
    return name in _MODULOS or name in _QUOTIENTS or name == "floor"


def _value(expr: Any, always: Callable[[Any], bool]) -> Any:
    import sympy  # type: ignore[import-untyped]

    name = type(expr).__name__
    if name == "floor":
        dividend, divisor = expr.args[0].as_numer_denom()
    else:
        dividend, divisor = expr.args
    if not always(sympy.Gt(divisor, 0)):
        return expr
    below = always(sympy.Lt(dividend, divisor))
    if name in _MODULOS:
        return dividend if below and always(sympy.Ge(dividend, 0)) else expr
    if below and always(sympy.Ge(dividend, 0)):
        return sympy.Integer(0)
    if always(sympy.Lt(dividend, 0)) and always(sympy.Ge(dividend, -divisor)):
        return sympy.Integer(-1)
    return expr
