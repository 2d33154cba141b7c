"""fp16 row sums read their loads widened a block at a time (decision 0265): the lane
loops of a whole block read a float array that ``ts_f16_widen_block`` filled (F16C
inline, or the integer widening), not a vector conversion call per vector of lanes.
Loads that are not one contiguous run of the row keep the per-element conversion."""

from __future__ import annotations

import ctypes

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.cpp.build import build_kernel
from torchstrata.inductor.codegen.cpp.exprs import PRELUDE
from torchstrata.inductor.codegen.cpp.half import (
    HALF_BLOCKS,
    HALF_PRELUDE,
    block_start,
    widened_blocks,
)
from torchstrata.inductor.codegen.cpp.sum_loops import LANE_BLOCK

PATHS = {"native": "", "portable": "#define TS_PORTABLE_HALF 1\n"}


def test_a_block_starts_where_the_loop_variable_is_a_whole_term():
    assert block_start("r0 + 4096*x0", "r0", "r0_block") == "r0_block + 4096*x0"
    assert block_start("4096*x0 + r0 + 3", "r0", "r0_block") == "4096*x0 + r0_block + 3"
    assert block_start("r0", "r0", "r0_block") == "r0_block"
    # not one contiguous run, or an index computed inside the loop (a gather)
    assert block_start("2*r0 + 4096*x0", "r0", "r0_block") is None
    assert block_start("r0 + tmp3", "r0", "r0_block") is None
    assert block_start("r0 + r0", "r0", "r0_block") is None
    assert block_start("(r0 + 1) + x0", "r0", "r0_block") is None
    assert block_start("r0 + r0_lane", "r0", "r0_block") is None
    assert block_start("r0 + (x0 % 3 == 0 ? 1 : 2)", "r0", "r0_block") is None
    assert block_start("r0 + 8*r1", "r0", "r0_block", ["r1"]) is None


def test_widened_blocks_rewrites_each_contiguous_load_once():
    body = [
        "const float tmp0 = ts_f16_to_f32(buf_x[r0 + 64*x0]);",
        "const float tmp1 = ts_f16_to_f32(buf_x[r0 + 64*x0]) + ts_f16_to_f32(buf_w[r0]);",
        "const float tmp2 = ts_f16_to_f32(buf_x[2*r0]);",
    ]
    before, after = widened_blocks(body, "r0", "r0_block", 256)
    assert before == [
        "alignas(64) float wide0_r0[256];",
        "ts_f16_widen_block(&buf_x[r0_block + 64*x0], wide0_r0, 256);",
        "alignas(64) float wide1_r0[256];",
        "ts_f16_widen_block(&buf_w[r0_block], wide1_r0, 256);",
    ]
    assert after == [
        "const float tmp0 = wide0_r0[r0 - r0_block];",
        "const float tmp1 = wide0_r0[r0 - r0_block] + wide1_r0[r0 - r0_block];",
        "const float tmp2 = ts_f16_to_f32(buf_x[2*r0]);",
    ]
    assert widened_blocks(body[2:], "r0", "r0_block", 256) == ([], body[2:])
    # an index term that the body itself defines changes within the loop
    derived = ["const int64_t r1 = r0 / 16;", "const float tmp0 = ts_f16_to_f32(buf_x[r0 + r1]);"]
    assert widened_blocks(derived, "r0", "r0_block", 256) == ([], derived)


@pytest.mark.parametrize("path", PATHS)
def test_the_block_widening_matches_torch_in_both_builds(tmp_path, path):
    """Every fp16 value, and counts that leave 8-, 1- and 15-value remainders."""
    source = (
        f"{PATHS[path]}{PRELUDE}{HALF_PRELUDE}{HALF_BLOCKS}\n"
        'extern "C" void widen(const uint16_t* __restrict__ x, float* __restrict__ y, '
        "const int64_t n) { ts_f16_widen_block(x, y, n); }\n"
    )
    kernel = build_kernel(source, "widen", 3, tmp_path).fn
    kernel.argtypes = [*kernel.argtypes[:2], ctypes.c_int64]
    every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.float16)
    for count in (every.numel(), 24, 17, 15, 1):
        x = every[-count:].clone()
        y = torch.full((count,), -1.0)
        kernel(x.data_ptr(), y.data_ptr(), count)
        want = x.float()
        assert torch.equal(y.isnan(), want.isnan())
        finite = ~want.isnan()
        assert torch.equal(y[finite].view(torch.int32), want[finite].view(torch.int32)), count


def _row_sum(rows: int, n: int, dtype: torch.dtype):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, n), dtype))
    xf = b.call(prim("convert_element_type"), x, torch.float32)
    return b.build([b.call(prim("convert_element_type"), b.call(prim("sum"), xf, (1,)), dtype)])


@pytest.mark.parametrize("n", [LANE_BLOCK - 1, LANE_BLOCK, 5 * LANE_BLOCK + 131])
def test_fp16_row_sums_read_widened_blocks_and_equal_torch(ind, n):
    """Whole blocks read the widened array, the partial block (and a row shorter than one
    block) the per-element conversion; small integers make every partial sum exact, so
    torch's result is the only right one whatever the order of the adds. The row length
    is an argument (decision 0285): both loops are in every source, run as the length says."""
    compiled = ind.compile(_row_sum(3, n, torch.float16), "cpp")
    (kernel,) = compiled.kernels
    body = ind.kernel_code(kernel.source)
    assert "ts_f16_widen_block(&buf_x[" in body and "wide0_r0[r0 - r0_block]" in body
    assert "ts_f16_to_f32(buf_x[" in body
    assert f"r0_block < (red_len / {LANE_BLOCK}) * {LANE_BLOCK}" in body
    assert "ts_f16_widen_block(const" in kernel.source
    x = torch.randint(-8, 9, (3, n), generator=torch.Generator().manual_seed(n)).half()
    (got,) = compiled(x)
    assert torch.equal(got, x.sum(-1))


def test_fp16_row_sums_of_random_values_within_one_rounding(ind):
    """Random values: the float lanes and double blocks add within a few float32 ulps of
    the exact sum (decision 0236), far below fp16's half ulp (2**-11 relative), so the
    result is the exact sum rounded once: within one fp16 ulp of it."""
    n = 7 * LANE_BLOCK + 77
    x = torch.randn(5, n, generator=torch.Generator().manual_seed(1)).half()
    (got,) = ind.compile(_row_sum(5, n, torch.float16), "cpp")(x)
    exact = x.double().sum(-1)
    ulp = exact.abs() * torch.finfo(torch.float16).eps
    assert ((got.double() - exact).abs() <= ulp + 2.0**-24).all(), (got, exact)


def test_a_block_whose_value_goes_to_a_row_cache_is_widened_into_the_cache():
    """Decision 0519: the lane loop neither copies the array nor stores the cache."""
    body = [
        "const int64_t r0 = r0_lanes + r0_lane;",
        "const float tmp0 = ts_f16_to_f32(buf_x[r0 + 64*x0]);",
        "const float tmp1 = static_cast<float>(tmp0);",
        "acc[r0_lane] = acc[r0_lane] + tmp1;",
        "row_cache0[r0] = tmp1;",
    ]
    before, after = widened_blocks(body, "r0", "r0_block", 256)
    assert before == ["ts_f16_widen_block(&buf_x[r0_block + 64*x0], &row_cache0[r0_block], 256);"]
    assert after == [body[0], "const float tmp0 = row_cache0[r0];", *body[2:4]]
    # a cached value computed from the load is not the load: the array stays
    computed = [
        *body[:3],
        "const float tmp2 = static_cast<float>(tmp1 * 2.0f);",
        "row_cache0[r0] = tmp2;",
    ]
    before, after = widened_blocks(computed, "r0", "r0_block", 256)
    assert before[0] == "alignas(64) float wide0_r0[256];" and after[-1] == "row_cache0[r0] = tmp2;"


def _centred(rows: int, n: int):
    """x - sum(x) per row, in float from fp16 and rounded back: a first phase whose loads
    a row cache keeps for the second."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, n), torch.float16))
    xf = b.call(prim("convert_element_type"), x, torch.float32)
    total = b.call(prim("broadcast_in_dim"), b.call(prim("sum"), xf, (1,)), (rows, n), (0,))
    return b.build(
        [b.call(prim("convert_element_type"), b.call(prim("sub"), xf, total), torch.float16)]
    )


def test_fp16_rows_cached_for_a_later_phase_are_widened_into_the_cache(ind):
    n = 3 * LANE_BLOCK + 37
    compiled = ind.compile(_centred(4, n), "cpp")
    (kernel,) = compiled.kernels
    body = ind.kernel_code(kernel.source)
    assert (
        f"ts_f16_widen_block(&buf_x[r0_block + red_len*x0], &row_cache0[r0_block], {LANE_BLOCK});"
        in body
    )
    # small integers: every sum and difference exact, so torch's result is the one answer
    x = torch.randint(-4, 5, (4, n), generator=torch.Generator().manual_seed(3)).half()
    (got,) = compiled(x)
    want = (x.float() - x.float().sum(-1, keepdim=True)).half()
    assert torch.equal(got, want)
