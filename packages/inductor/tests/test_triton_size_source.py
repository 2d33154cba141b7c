"""Triton source of sizes with floor division and modulo (decisions 0438, 0470): the
printed text gives sympy's floored value whether ``//`` and ``%`` truncate (compiled
Triton, its interpreter) or floor (Python)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import sympy
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from torchstrata.core import UnprintableSize
from torchstrata.inductor.codegen.triton.size_source import triton_size_source

S0 = sympy.Symbol("s0", integer=True, positive=True)
S1 = sympy.Symbol("s1", integer=True, positive=True)


class Truncating(int):
    """An integer whose ``//`` and ``%`` truncate toward zero, as C's and Triton's do."""

    def __add__(self, other: Any) -> Truncating:
        return Truncating(int(self) + int(other))

    __radd__ = __add__

    def __sub__(self, other: Any) -> Truncating:
        return Truncating(int(self) - int(other))

    def __rsub__(self, other: Any) -> Truncating:
        return Truncating(int(other) - int(self))

    def __mul__(self, other: Any) -> Truncating:
        return Truncating(int(self) * int(other))

    __rmul__ = __mul__

    def __neg__(self) -> Truncating:
        return Truncating(-int(self))

    def __floordiv__(self, other: Any) -> Truncating:
        a, b = int(self), int(other)
        quotient = abs(a) // abs(b)
        return Truncating(quotient if (a < 0) == (b < 0) else -quotient)

    def __rfloordiv__(self, other: Any) -> Truncating:
        return Truncating(other) // self

    def __mod__(self, other: Any) -> Truncating:
        return Truncating(int(self) - int(self // other) * int(other))

    def __rmod__(self, other: Any) -> Truncating:
        return Truncating(other) % self


def _evaluate(text: str, values: dict[str, int], integer: type) -> int:
    """``text`` with each symbol bound to ``integer`` of its value (``tl.maximum`` is
    ``max``): Python's flooring operators with ``int``, C's with :class:`Truncating`."""
    names = {name: integer(value) for name, value in values.items()}
    names["tl"] = type("tl", (), {"maximum": staticmethod(max), "minimum": staticmethod(min)})
    return int(eval(text, {}, names))  # the printer's own output


def test_sizes_known_non_negative_print_plain_floor_division():
    assert triton_size_source(sympy.floor(S0 / 2)) == "(s0 // 2)"
    assert triton_size_source(sympy.Mod(1, S0)) == "(1 % s0)"
    assert triton_size_source(sympy.Max(1, sympy.floor(S0 / 3))) == "tl.maximum(1, (s0 // 3))"


def test_a_function_that_is_no_size_is_refused():
    with pytest.raises(UnprintableSize):
        triton_size_source(sympy.sqrt(S0))


#: expressions of any sign's dividend and divisor (a slice write's offset, a roll's
#: shift), as the ShapeEnv's sizes of ``cache[:, t:2*t] = k`` and ``torch.roll`` read
EXPRESSIONS = [
    sympy.floor((1 - S0) / 2),
    sympy.Mod(1 - S0, S0),
    sympy.Mod(
        S0 - sympy.Mod(S0 + (40 - S0) * sympy.floor(-2 * S0 / (80 - 2 * S0)), S0 - 40), 40 - S0
    ),
    sympy.floor((S0 - 3 * S1) / (S1 - 7)),
    sympy.Mod(S1 - S0, S0 - S1 - 5),
    sympy.ceiling((S1 - S0) / 3),
    sympy.Max(sympy.Mod(-S0, 7), S1 - 9) - sympy.Min(sympy.floor(-S1 / 4), S0),
]


@pytest.mark.parametrize("expr", EXPRESSIONS, ids=str)
@settings(max_examples=200, deadline=None)
@given(s0=st.integers(1, 200), s1=st.integers(1, 200))
def test_a_dividend_of_any_sign_prints_the_floored_value_in_either_convention(
    expr: Any, s0: int, s1: int
):
    try:
        value = expr.subs({S0: s0, S1: s1})
    except ZeroDivisionError:
        value = sympy.nan
    assume(value.is_Integer)  # a zero divisor: no size, kept from a lowering's sizes
    text = triton_size_source(expr)
    values = {"s0": s0, "s1": s1}
    assert _evaluate(text, values, int) == int(value)  # Python's operators: floor
    assert _evaluate(text, values, Truncating) == int(value)  # C's and Triton's: truncate


def test_truncating_integers_truncate():
    # the oracle above: C's quotient and remainder, unlike Python's
    assert Truncating(-7) // 2 == -3 and Truncating(-7) % 2 == -1
    assert Truncating(7) % -2 == 1 and 7 % Truncating(-2) == 1
    assert math.floor(-7 / 2) == -4
