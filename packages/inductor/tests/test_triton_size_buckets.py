"""Triton block choices on symbolic sizes (decision 0400): each records the bucket it
relies on as conditions of the lowering, never the size's value."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from torchstrata.core import Graph, GraphBuilder, Level, SizeGuards, TensorMeta, prim
from torchstrata.inductor.codegen.triton.backend import TritonBackend
from torchstrata.inductor.codegen.triton.printer import size_values
from torchstrata.inductor.codegen.triton.size_buckets import (
    capped_power_of_2,
    next_power_of_2,
    record_specialisation,
    same_size,
)
from torchstrata.inductor.codegen.triton.sized_launch import size_function, sized_record_checks


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
    # floor division and modulo as Python reads them (decision 0438)
    floored = size_function(("s0", "s1"), (s0 // s1, s0 % s1, 64 * (s0 // 2)))
    assert floored(7, 2) == (3, 1, 192)
    assert floored(9, 4) == (2, 1, 256)


def _softmax_rows(length: Any) -> Graph:
    """``softmax(x, 1)`` over ``[3, length]``."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((3, length), torch.float32))

    def wide(value: Any) -> Any:
        return b.call(prim("broadcast_in_dim"), value, (3, length), (0,))

    exps = b.call(prim("exp"), b.call(prim("sub"), x, wide(b.call(prim("amax"), x, (1,)))))
    return b.build([b.call(prim("div"), exps, wide(b.call(prim("sum"), exps, (1,))))])


@pytest.mark.parametrize("scale", [1, 8])
def test_a_symbolic_gpu_source_takes_the_symbols_and_records_its_specialisation(ind, scale):
    # generated for a GPU without one: the source and the conditions its launch relies on
    guards = SizeGuards({"s0": 20})
    with guards.active():
        kernel = ind.only_kernel(_softmax_rows(guards.symbol("s0") * scale))
        kernel, configs, generated = TritonBackend(interpret=False).generate(kernel, False)
        sized_record_checks(kernel, configs, size_values(kernel), interpret=False)
    (source,) = {text for _, text in generated}
    assert "do_not_specialize=['xnumel', 's0']" in source
    assert "s0, XBLOCK: tl.constexpr" in source  # a runtime argument, not a constant
    # a row length of 8*s0 tells Triton its divisor at every size, s0 none
    assert ("rnumel = (rnumel // 8) * 8" in source) == (scale == 8)
    assert all(config.rblock == 32 * scale for config in configs)  # 20's bucket
    served = [n for n in range(1, 80) if guards.holds({"s0": n})]
    if scale == 1:  # the bucket of 32 but its multiple of 16 (another binary)
        assert served == [n for n in range(17, 33) if n != 32]
    else:  # 8*20 is a multiple of 16, as 8*s0 is at every even s0
        assert served == [n for n in range(17, 33) if n % 2 == 0]


def test_a_static_row_length_is_a_constexpr_and_a_symbolic_one_an_argument(ind):
    # decision 0465: a static lowering's rnumel folds into the binary; a symbolic one's
    # serves every length of its bucket, so it stays an argument Triton does not specialise
    static = ind.only_kernel(_softmax_rows(20))
    _, _, generated = TritonBackend(interpret=False).generate(static, False)
    (source,) = {text for _, text in generated}
    assert "xnumel, rnumel: tl.constexpr, XBLOCK: tl.constexpr" in source
    guards = SizeGuards({"s0": 20})
    with guards.active():
        symbolic = ind.only_kernel(_softmax_rows(guards.symbol("s0")))
        _, _, generated = TritonBackend(interpret=False).generate(symbolic, False)
    (source,) = {text for _, text in generated}
    assert "rnumel: tl.constexpr" not in source and "xnumel, rnumel, s0" in source


def _scaled_rows(rows: int, length: int) -> Graph:
    """``x * w`` (``w`` one row, the same for every row) then each row's sum."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, length), torch.float32))
    w = b.input("w", TensorMeta((length,), torch.float32))
    wide = b.call(prim("broadcast_in_dim"), w, (rows, length), (1,))
    return b.build([b.call(prim("sum"), b.call(prim("mul"), x, wide), (1,))])


def test_a_load_the_same_for_every_row_is_one_row_of_the_tile(ind):
    # loaded as [XBLOCK, RBLOCK] it was read once per row of the tile (decision 0465)
    kernel = ind.only_kernel(_scaled_rows(64, 96))
    _, _, generated = TritonBackend(interpret=False).generate(kernel, False)
    (source,) = {text for _, text in generated}
    assert "tl.load(buf_w + (r0), rmask, other=0, eviction_policy='evict_last')" in source
    assert "tl.load(buf_x + (r0 + rnumel*x0 + xzero), xmask & rmask" in source


def _column_sum(length: Any) -> Graph:
    """``x.sum(0)`` of ``x: [length, 24]``: a weight gradient's column sum over the rows."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((length, 24), torch.float32))
    return b.build([b.call(prim("sum"), x, (0,))])


@pytest.mark.parametrize("hint", [40, 48])
def test_a_symbolic_gpu_column_sum_loops_over_any_number_of_rows(ind, hint):
    # a column sum's tiles take at most 32 of its rows at a time: a symbolic row count
    # records no bucket (decision 0440); its loads run along the columns, so Triton
    # specialises on them (``xnumel``, 24) and not on the row count (``rnumel``)
    guards = SizeGuards({"s0": hint})
    with guards.active():
        kernel = ind.only_kernel(_column_sum(guards.symbol("s0")))
        kernel, configs, generated = TritonBackend(interpret=False).generate(kernel, False)
        sized_record_checks(kernel, configs, size_values(kernel), interpret=False)
    assert configs and all(not c.persistent and c.rblock in (8, 16, 32) for c in configs)
    (source,) = {text for _, text in generated}
    assert "do_not_specialize=['rnumel', 's0']" in source
    # every row count up to the tuning threshold (24 * rows < 65536), multiples of 16 too
    assert [n for n in range(2, 3000) if guards.holds({"s0": n})] == list(range(2, 2731))
    # an int row count keeps its own, shorter block (the static path as before)
    static = ind.only_kernel(_column_sum(5))
    _, static_configs, _ = TritonBackend(interpret=False).generate(static, False)
    assert {c.rblock for c in static_configs} == {8}


def test_a_symbolic_split_sum_pads_to_one_more_part_at_every_size():
    from torchstrata.inductor.codegen.triton.split_sums import MIN_LENGTH, split_plan

    guards = SizeGuards({"s0": 3001})
    parts, padding = split_plan(guards.symbol("s0"))
    assert (parts.hint, padding.hint) == (3, 3 * 1024 - 3001)
    evaluate = size_function(("s0",), (parts, padding))
    # a multiple of the part takes one part of zeros (never a part of no rows)
    assert [evaluate(n) for n in (2048, 4099, 100003)] == [(3, 1024), (5, 1021), (98, 349)]
    assert guards.holds({"s0": 10**6}) and not guards.holds({"s0": MIN_LENGTH - 1})
    short = SizeGuards({"s0": 100})
    assert split_plan(short.symbol("s0")) == (1, 0)  # no split, as the ints below it
    assert short.holds({"s0": MIN_LENGTH - 1}) and not short.holds({"s0": MIN_LENGTH})
