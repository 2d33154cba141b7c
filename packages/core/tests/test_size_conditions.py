"""``core.size_values.conditions_check``: a lowering's conditions compiled once into
Python (decision 0471) give exactly sympy's truth values, where printed and where not."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
import sympy  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from torchstrata.core import UnprintableSize
from torchstrata.core.size_conditions import condition_source
from torchstrata.core.size_values import conditions_check, violated

#: sizes, as a lowering's symbols are made (positive integers), and an integer of any sign
S0 = sympy.Symbol("s0", integer=True, positive=True)
S1 = sympy.Symbol("s1", integer=True, positive=True)
K = sympy.Symbol("k", integer=True)


def _divided(kind: Callable[[Any, Any], Any]) -> Callable[[tuple[Any, Any]], Any]:
    """``kind(a, b)``, or ``a`` where that is no integer expression (``b`` is zero)."""

    def make(ab: tuple[Any, Any]) -> Any:
        a, b = ab
        if b == 0:
            return a
        made = kind(a, b)
        return a if made.has(sympy.nan, sympy.zoo) else made

    return make


def _sizes(draw: Any) -> Any:
    """An integer expression over the symbols: sums, products, floor and ceiling
    division, modulo, ``Max``, ``Min``."""
    leaves = st.sampled_from([S0, S1, K]) | st.integers(-9, 9).map(sympy.Integer)

    def combine(children: Any) -> Any:
        pair = st.tuples(children, children)
        return st.one_of(
            pair.map(lambda ab: ab[0] + ab[1]),
            pair.map(lambda ab: ab[0] - ab[1]),
            pair.map(lambda ab: ab[0] * ab[1]),
            pair.map(_divided(lambda a, b: sympy.floor(a / b))),
            pair.map(_divided(lambda a, b: sympy.ceiling(a / b))),
            pair.map(_divided(sympy.Mod)),
            pair.map(lambda ab: sympy.Max(*ab)),
            pair.map(lambda ab: sympy.Min(*ab)),
        )

    return draw(st.recursive(leaves, combine, max_leaves=5))


_RELATIONS = [sympy.Eq, sympy.Ne, sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge]


@st.composite
def _conditions(draw: Any, depth: int = 2) -> Any:
    """A sympy boolean: a relation of two size expressions, or And/Or/Not of them."""
    if depth == 0 or draw(st.booleans()):
        relation = draw(st.sampled_from(_RELATIONS))
        return relation(_sizes(draw), _sizes(draw))
    kind = draw(st.sampled_from(["And", "Or", "Not"]))
    if kind == "Not":
        return sympy.Not(draw(_conditions(depth - 1)))
    parts = draw(st.lists(_conditions(depth - 1), min_size=2, max_size=3))
    return getattr(sympy, kind)(*parts)


def _outcome(check: Callable[[], bool]) -> Any:
    """``check()``'s answer, or the type of what it raised."""
    try:
        return check()
    except (TypeError, ValueError, ZeroDivisionError) as error:
        return type(error)


def _sympy_holds(conditions: list[Any], values: Mapping[str, int]) -> Any:
    return _outcome(lambda: violated(conditions, values) is None)


@settings(max_examples=300, deadline=None)
@given(
    conditions=st.lists(_conditions(), min_size=1, max_size=4),
    samples=st.lists(
        st.tuples(st.integers(1, 300), st.integers(1, 300), st.integers(-300, 300)),
        min_size=1,
        max_size=8,
    ),
)
def test_compiled_conditions_agree_with_sympy(conditions, samples):
    check = conditions_check(conditions)
    for s0, s1, k in samples:
        values = {"s0": s0, "s1": s1, "k": k}
        got = _outcome(lambda values=values: check(values))
        assert got == _sympy_holds(conditions, values), values


def test_floor_modulo_and_extremes_print_as_python():
    n = sympy.floor(S0 / 2)
    assert condition_source(sympy.Lt(n, 7)) == "((s0 // 2) < 7)"
    assert condition_source(sympy.Eq(sympy.Mod(S0, 4), 1)) == "((s0 % 4) == 1)"
    relation = sympy.Ge(sympy.Max(1, n), S1)
    assert condition_source(sympy.Not(relation)) == "(max(1, (s0 // 2)) < s1)"
    both = sympy.Or(sympy.Eq(S0, 3), sympy.Ne(S1, 4))
    assert condition_source(both) in ("((s0 == 3) | (s1 != 4))", "((s1 != 4) | (s0 == 3))")


@pytest.mark.parametrize(
    "condition",
    [sympy.Lt(S0 / 3, 6), sympy.Lt(sympy.sqrt(S0), 6)],
    ids=str,
)
def test_what_has_no_exact_python_form_is_substituted(condition):
    with pytest.raises(UnprintableSize):
        condition_source(condition)
    check = conditions_check([sympy.Gt(S0, 2), condition])
    for size in range(1, 60):
        values = {"s0": size}
        assert check(values) == (violated([sympy.Gt(S0, 2), condition], values) is None)


def test_a_float_literal_of_sizes_prints_as_python_floats():
    # floats of sizes print in Python (decision 0500): the compiled condition answers as
    # sympy's does at every size
    condition = sympy.Lt(sympy.Float(0.5) * S0, 6)
    assert "0.5" in condition_source(condition)
    check = conditions_check([sympy.Gt(S0, 2), condition])
    for size in range(1, 60):
        values = {"s0": size}
        assert check(values) == (violated([sympy.Gt(S0, 2), condition], values) is None)


def test_a_zero_divisor_answers_as_sympy_does():
    # sympy's Mod(s0, s1 - 3) at s1 = 3 is nan, an error to compare: so is the check
    conditions = [sympy.Eq(sympy.Mod(S0, S1 - 3), 0)]
    check = conditions_check(conditions)
    values = {"s0": 5, "s1": 3}
    assert _outcome(lambda: check(values)) == _sympy_holds(conditions, values)
    assert check({"s0": 6, "s1": 6}) and not check({"s0": 5, "s1": 6})
