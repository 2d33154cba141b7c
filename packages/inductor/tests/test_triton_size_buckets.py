"""Triton block choices on symbolic sizes (decision 0400): each records the bucket it
relies on as conditions of the lowering, never the size's value."""

from __future__ import annotations

import pytest

from torchstrata.core import SizeGuards, SizeRead
from torchstrata.inductor.codegen.triton.size_buckets import (
    capped_power_of_2,
    next_power_of_2,
    record_specialisation,
    same_size,
)
from torchstrata.inductor.codegen.triton.sized_launch import size_function


def test_a_power_of_two_records_the_bucket_of_its_hint():
    guards = SizeGuards({"s0": 7})
    assert next_power_of_2(guards.symbol("s0")) == 8
    assert [guards.holds({"s0": n}) for n in (4, 5, 8, 9)] == [False, True, True, False]
    assert next_power_of_2(7) == 8 and next_power_of_2(1) == 1  # ints as before


def test_a_capped_block_of_rows_records_only_its_upper_bound():
    guards = SizeGuards({"s0": 40})
    assert capped_power_of_2(guards.symbol("s0"), 4096, floor=16) == 64
    assert [guards.holds({"s0": n}) for n in (2, 33, 64, 65)] == [True, True, True, False]
    below = SizeGuards({"s0": 5})
    assert capped_power_of_2(below.symbol("s0"), 4096, floor=16) == 16  # the floor's bucket
    assert below.holds({"s0": 16}) and not below.holds({"s0": 17})
    above = SizeGuards({"s0": 9000})
    assert capped_power_of_2(above.symbol("s0"), 4096) == 4096
    assert above.conditions == []  # every size beyond the cap takes the cap


def test_triton_specialisation_is_a_condition():
    guards = SizeGuards({"s0": 7, "s1": 32})
    record_specialisation((guards.symbol("s0") * 3, guards.symbol("s1"), 5))
    assert guards.holds({"s0": 9, "s1": 48})
    assert not guards.holds({"s0": 16, "s1": 48})  # 48 divides by 16, 3*16 too
    assert not guards.holds({"s0": 9, "s1": 40})


def test_sizes_are_one_by_expression_not_by_value():
    guards = SizeGuards({"s0": 8, "s1": 8})
    a, b = guards.symbol("s0"), guards.symbol("s1")
    assert same_size(a, guards.symbol("s0")) and not same_size(a, b)
    assert not same_size(a, 8) and same_size(8, 8)
    assert guards.conditions == []


def test_size_arguments_are_evaluated_from_the_symbols():
    guards = SizeGuards({"s0": 7, "s1": 3})
    s0, s1 = guards.symbol("s0"), guards.symbol("s1")
    evaluate = size_function(("s0", "s1"), (s0 * s1, s0 + 1, 4))
    assert evaluate(5, 2) == (10, 6, 4)
    with pytest.raises(SizeRead):  # not a sum of products: refused while lowering
        size_function(("s0",), (s0 // s1,))
