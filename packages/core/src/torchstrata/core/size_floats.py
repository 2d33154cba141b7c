"""Floats computed from the sizes of a symbolic lowering (issue 33, decision 0500).

An attention scales its scores by ``1 / math.sqrt(q.shape[-1])``: with a symbolic width
the scale is a ``SymFloat`` (``OpaqueUnaryFn_sqrt(ToFloat(s0))``, ``FloatPow(ToFloat(s0),
-0.5)``, ``FloatTrueDiv(1.0, ToFloat(s0))``). A graph lowered for many sizes holds it as
a :class:`SizeFloat`: the sympy expression and its value at the call being lowered.
Generated code computes it from the size symbols it already takes as arguments, in
double as Python does, printed per language by the active size printer
(``core.size_printer``: the launcher's Python, C++'s ``std::sqrt``, Triton's
``tl.sqrt_rn``); the kernel converts the double to its compute type as it converts
the literal a static lowering would print.

Like a :class:`~torchstrata.core.SizeValue` it is no number: reading its value
(``float()``, a comparison with a number, printing with no printer active) raises
:class:`~torchstrata.core.SizeRead` and refuses the lowering (the sizes then lower on
their own). Arithmetic with numbers and sizes of its lowering gives another
:class:`SizeFloat`; two of one lowering with one expression are equal.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from torchstrata.core.size_source import UnprintableSize, active_printer, python_source


@functools.cache
def _sympy() -> Any:
    import sympy  # type: ignore[import-untyped]

    return sympy


def _operand(value: Any, guards: Any) -> Any:
    """The sympy expression of an operand of arithmetic with a :class:`SizeFloat`
    (another of ``guards``, a size of it, a number), or None."""
    if getattr(type(value), "is_size_value", False):
        if value.guards is not guards:
            raise guards.refuse("a size of another lowering")
        return value.expr
    if type(value) is bool or not isinstance(value, int | float):
        return None
    return _sympy().Integer(value) if isinstance(value, int) else _sympy().Float(value)


class SizeFloat:
    """A float of a symbolic lowering computed from its sizes: ``expr`` (sympy, over the
    symbols of ``guards``) and ``hint`` (its value at the call being lowered)."""

    __slots__ = ("expr", "guards", "hint")

    #: scanned, printed and parsed as a lowering's size is (``core.graph.format_value``,
    #: ``symbols_of``): by its expression, reading nothing
    is_size_value = True
    #: a float, not an integer size (``core.is_size_float``)
    is_size_float = True

    def __init__(self, expr: Any, hint: float, guards: Any) -> None:
        self.expr = expr
        self.hint = hint
        self.guards = guards

    def _arith(self, other: Any, op: Any, reflected: bool = False) -> Any:
        operand = _operand(other, self.guards)
        if operand is None:
            return NotImplemented
        a, b = (operand, self.expr) if reflected else (self.expr, operand)
        expr = op(a, b)
        if not getattr(expr, "free_symbols", None):
            return float(expr)
        values = {s: _sympy().Integer(self.guards.hints[s.name]) for s in expr.free_symbols}
        return SizeFloat(expr, float(expr.xreplace(values)), self.guards)

    def __add__(self, other: Any) -> Any:
        return self._arith(other, lambda a, b: a + b)

    def __radd__(self, other: Any) -> Any:
        return self._arith(other, lambda a, b: a + b, True)

    def __sub__(self, other: Any) -> Any:
        return self._arith(other, lambda a, b: a - b)

    def __rsub__(self, other: Any) -> Any:
        return self._arith(other, lambda a, b: a - b, True)

    def __mul__(self, other: Any) -> Any:
        return self._arith(other, lambda a, b: a * b)

    def __rmul__(self, other: Any) -> Any:
        return self._arith(other, lambda a, b: a * b, True)

    def __truediv__(self, other: Any) -> Any:
        return self._arith(other, _float_division)

    def __rtruediv__(self, other: Any) -> Any:
        return self._arith(other, _float_division, True)

    def __neg__(self) -> SizeFloat:
        return SizeFloat(-self.expr, -self.hint, self.guards)

    def __pos__(self) -> SizeFloat:
        return self

    def __eq__(self, other: object) -> bool:
        if type(other) is SizeFloat:
            return other.guards is self.guards and bool(other.expr == self.expr)
        if getattr(type(other), "is_size_value", False):
            return False  # a size is an integer expression: never this one
        raise self.guards.refuse(f"{self.expr} == {other!r}")

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.expr)

    def __bool__(self) -> bool:
        raise self.guards.refuse(f"bool({self.expr})")

    def __float__(self) -> float:
        raise self.guards.refuse(f"float({self.expr})")

    def __int__(self) -> int:
        raise self.guards.refuse(f"int({self.expr})")

    def __index__(self) -> int:
        raise self.guards.refuse(f"int({self.expr})")

    def __lt__(self, other: Any) -> bool:
        raise self.guards.refuse(f"{self.expr} < {other!r}")

    def __le__(self, other: Any) -> bool:
        raise self.guards.refuse(f"{self.expr} <= {other!r}")

    def __gt__(self, other: Any) -> bool:
        raise self.guards.refuse(f"{self.expr} > {other!r}")

    def __ge__(self, other: Any) -> bool:
        raise self.guards.refuse(f"{self.expr} >= {other!r}")

    def __format__(self, spec: str) -> str:
        if spec:
            raise self.guards.refuse(f"format({self.expr}, {spec!r})")
        return str(self)

    def __str__(self) -> str:
        return self._printed(active_printer())

    def __repr__(self) -> str:
        # Python's source (a launcher's extern argument; memo keys of constants)
        return self._printed(python_source)

    def _printed(self, printer: Any) -> str:
        if printer is None:
            raise self.guards.refuse(f"printing {self.expr}")
        try:
            return str(printer(self.expr))
        except UnprintableSize:
            raise self.guards.refuse(f"printing {self.expr}") from None


def _float_division(a: Any, b: Any) -> Any:
    from torch.utils._sympy.functions import FloatTrueDiv, ToFloat

    def as_float(expr: Any) -> Any:
        return expr if not expr.is_integer else ToFloat(expr)

    return FloatTrueDiv(as_float(a), as_float(b))


def is_size_float(value: Any) -> bool:
    """Whether ``value`` is a :class:`SizeFloat` (a float of a lowering's sizes)."""
    return getattr(type(value), "is_size_float", False) is True


def size_float(expr: Any, guards: Any) -> SizeFloat | float:
    """The :class:`SizeFloat` of ``expr`` (a sympy float expression over symbols named
    as ``guards``' are: a ``SymFloat``'s), a float where it has no symbol."""
    free = getattr(expr, "free_symbols", ())
    if not free:
        return float(expr)
    expr = expr.xreplace({s: guards.symbol(s.name).expr for s in free})
    values = {s: _sympy().Integer(guards.hints[s.name]) for s in expr.free_symbols}
    hint = float(expr.xreplace(values))
    if not math.isfinite(hint):
        raise guards.refuse(f"{expr} is {hint} at the sizes lowered")
    return SizeFloat(expr, hint, guards)
