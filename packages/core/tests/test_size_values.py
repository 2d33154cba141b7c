"""``core.SizeValue``: sizes of a lowering made once for many sizes (decision 0381).
Decisions on them are recorded, reads of their value refused."""

from __future__ import annotations

import struct

import pytest
import sympy  # type: ignore[import-untyped]

from torchstrata.core import SizeGuards, SizeRead, SizeValue
from torchstrata.core.size_values import conditions_check, violated


def _size(name: str = "s0", hint: int = 17) -> tuple[SizeGuards, SizeValue]:
    guards = SizeGuards({name: hint})
    return guards, guards.symbol(name)


def test_arithmetic_keeps_the_expression_and_the_hint():
    guards, n = _size()
    made = (2 * n + 3) // 2 - n % 4
    assert isinstance(made, SizeValue)
    assert made.hint == (2 * 17 + 3) // 2 - 17 % 4
    assert n - n == 0 and type(n - n) is int
    assert guards.conditions == []


def test_a_decision_is_recorded_with_its_outcome():
    guards, n = _size()
    assert n < 32
    assert not (n > 20)
    assert [str(c) for c in guards.conditions] == ["s0 < 32", "s0 <= 20"]
    assert guards.holds({"s0": 20})
    assert not guards.holds({"s0": 21})  # crosses the second decision
    assert not guards.holds({"s0": 40})


def test_a_decision_true_at_every_size_records_nothing():
    guards, n = _size()
    assert n >= 2 and n > 1 and n + 1 > n and bool(n) and 2 * n != n
    assert guards.conditions == []


def test_equal_expressions_are_equal_without_a_guard():
    guards, n = _size()
    assert n + 1 == 1 + n
    assert {n * 2: "x"}[2 * n] == "x"
    assert guards.conditions == []


def test_a_lookup_among_ints_misses_and_records_nothing():
    # documented (decision 0381): such a site must be right at every size on a miss
    guards, n = _size()
    assert {17: "seventeen"}.get(n) is None
    assert guards.conditions == [] and not guards.refused


def test_an_equality_that_pins_the_size_is_a_refused_read():
    guards, n = _size()
    with pytest.raises(SizeRead):
        bool(n == 17)
    assert guards.refused
    assert n + 1 != 17  # an inequality is a condition
    # the pinning equality is recorded too: the failure is that size's own (0382)
    assert [str(c) for c in guards.conditions] == ["Eq(s0, 17)", "Ne(s0 + 1, 17)"]


def test_a_divisibility_test_is_a_condition():
    # ``Eq(Mod(s0, 8), 0)`` holds at every multiple of 8: no size pinned (decision 0382)
    guards, n = _size(hint=24)
    assert n % 8 == 0 and n % 16 != 0
    assert not guards.refused
    assert [str(c) for c in guards.conditions] == ["Eq(Mod(s0, 8), 0)", "Ne(Mod(s0, 16), 0)"]
    assert guards.holds({"s0": 40}) and not guards.holds({"s0": 48})
    assert not guards.holds({"s0": 20})


@pytest.mark.parametrize(
    "read",
    [
        int,
        float,
        range,
        lambda n: [0] * n,
        lambda n: struct.pack("q", n),
        lambda n: f"{n:d}",
        lambda n: n == 17.0,  # Python would answer False without asking the size
    ],
)
def test_reading_the_value_is_refused_even_when_caught(read):
    guards, n = _size()
    with pytest.raises(SizeRead):
        read(n)
    assert guards.refused  # the lowering is refused even if a caller swallowed the error


def test_printing_gives_source_only_for_plain_arithmetic():
    _, n = _size()
    # in parentheses but for a symbol (an operand in C: ``(2*s0 + 1)*x0``, ``xi / (2*s0)``);
    # a power as a product (decision 0382)
    assert str(2 * n + 1) == "(2*s0 + 1)" and repr((n, 3)) == "(s0, 3)"
    assert str(2 * n) == "(2*s0)" and str(n * n) == "(s0*s0)"
    with pytest.raises(SizeRead):  # floor division: no printer active (decision 0407)
        str(n // 2)


def test_sizes_of_two_lowerings_and_of_a_closed_one_are_never_equal():
    first, n = _size(hint=5)
    second, m = _size(hint=5)
    assert n != m and first.conditions == [] and second.conditions == []
    first.close()
    assert n != 5 and n == n
    assert first.conditions == []


def test_the_generated_check_agrees_with_substitution():
    guards, n = _size(hint=17)
    assert n < 32 and n != 20 and 2 * n + 1 >= 35 and n * n > 200
    # one condition the generated code cannot spell (a rational side): substituted
    conditions = [*guards.conditions, sympy.Lt(n.expr / 3, 6)]
    check = conditions_check(conditions)
    for size in range(2, 40):
        assert check({"s0": size}) == (violated(conditions, {"s0": size}) is None), size
    assert check({"s0": 17}) and not check({"s0": 20}) and not check({"s0": 18})


def test_same_size_matches_by_expression_and_decides_nothing():
    # sites where "not the same" is right at every size match this way (decision 0406)
    from torchstrata.core import same_size, same_sizes

    guards, n = _size(hint=5)
    assert not same_size(n, 5) and not same_sizes((n, 8), (5, 8))
    assert same_size(n + 1, 1 + n) and same_sizes((2 * n, 3), (n * 2, 3))
    assert same_size(4, 4) and not same_size(4, 5) and not same_sizes((n,), (n, 1))
    assert guards.conditions == [] and not guards.refused


def test_an_equality_true_far_from_the_hint_is_a_condition():
    # ``Max(1, s0//3) == s0//3`` holds for every s0 >= 3: recorded, no size pinned (0406)
    guards, n = _size(hint=9)
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    stride = guards.of(sympy.Max(1, sympy.floor(s0 / 3)))
    assert stride == n // 3
    assert not guards.refused and guards.holds({"s0": 100}) and not guards.holds({"s0": 2})
    with pytest.raises(SizeRead):  # holds at 8 and 9 only: pinned
        bool(n // 2 == 4)
