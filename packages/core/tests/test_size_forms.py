"""Sizes whose floor divisions and modulos every size decides are simplified, and sites
that ask whether two sizes are one expression decide nothing (decision 0480)."""

from __future__ import annotations

import sympy  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from torchstrata.core import (
    SizeGuards,
    SizeValue,
    SymbolicSizes,
    compared_by_expression,
    same_layout,
)
from torchstrata.core.size_forms import simplified_sizes
from torchstrata.core.size_values import _always

S0 = sympy.Symbol("s0", integer=True, positive=True)


def test_a_shift_modulo_a_size_is_the_shift():
    guards = SizeGuards({"s0": 16})
    n = guards.symbol("s0")
    assert type(1 % n) is int and 1 % n == 1
    assert type(-1 // n) is int and -1 // n == -1
    assert isinstance(n // 2, SizeValue) and str((n // 2).expr) == "floor(s0/2)"
    assert guards.conditions == []


def test_a_rolls_nested_offset_is_its_plain_form():
    # the ShapeEnv's form of a roll's offset by 1 (decision 0470's kind): ``s0 - 2``
    shift = sympy.Mod(1, S0)
    offset = sympy.Mod(-(S0 - shift) * sympy.floor(-shift / (S0 - shift)) - shift, S0 - shift)
    guards = SizeGuards({"s0": 9})
    made = guards.of(offset)
    assert isinstance(made, SizeValue)
    assert made.expr == S0 - 2 and made.hint == 7
    assert guards.conditions == []


def test_a_form_that_the_sizes_do_not_decide_stays():
    for expr in (sympy.Mod(S0, 3), sympy.floor(S0 / 2), sympy.Mod(2, S0), sympy.Mod(S0 - 3, S0)):
        assert simplified_sizes(expr, _always) == expr


_affine = st.tuples(st.integers(-3, 3), st.integers(-6, 6))


@settings(max_examples=200, deadline=None)
@given(_affine, _affine, st.booleans(), st.integers(2, 60))
def test_a_simplified_form_has_the_value_at_every_size(dividend, divisor, modulo, size):
    a = dividend[0] * S0 + dividend[1]
    b = divisor[0] * S0 + divisor[1]
    if b.subs(S0, size) == 0 or b == 0:
        return  # no size (sympy's nan): the lowering's conditions keep it out
    expr = sympy.Mod(a, b) if modulo else sympy.floor(a / b)
    simplified = simplified_sizes(expr, _always)
    assert simplified.subs(S0, size) == expr.subs(S0, size)


def test_sizes_equal_at_the_hint_only_are_two_expressions_there():
    guards = SizeGuards({"s0": 4})
    n = guards.symbol("s0")
    with compared_by_expression():
        assert (n - 4 == 0) is False and n + 1 == 1 + n
        assert (n, 1) != (2 * (n // 2), 1)
    assert guards.conditions == []
    assert n == 2 * (n // 2)  # outside: a decision, recorded
    assert [str(c) for c in guards.conditions] == ["Eq(s0, 2*floor(s0/2))"]


def test_same_layout_of_one_stride_expression_records_nothing():
    # ``x[:, :t // 2]``'s strides against themselves: no size compares ``t // 2 > 1``
    sizes = SymbolicSizes({"L['x']": (1,)})
    t = sizes.size("L['x']", 1, 16)
    shape, strides = (2, t // 2, 3), (3 * t, 3, 1)
    assert same_layout(shape, strides, (3 * t, 3, 1))
    assert sizes.guard_exprs() == ()
