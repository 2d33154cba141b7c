"""fp16 elementwise loops widen their loads and narrow their stores a block at a time
(decision 0516): the lane loop computes in floats between ``ts_f16_widen_block`` and
``ts_f16_narrow_block``, no vector conversion call per vector of lanes for them, and the
results are eager's bit for bit (odd widths, NaN, inf, ties, overflow, subnormals)."""

from __future__ import annotations

import ctypes

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.cpp.build import build_kernel, find_compiler
from torchstrata.inductor.codegen.cpp.exprs import PRELUDE
from torchstrata.inductor.codegen.cpp.half import BF16_BLOCKS, HALF_BLOCKS, HALF_PRELUDE
from torchstrata.inductor.codegen.cpp.half_loops import HALF_BLOCK, block_half_loops

PATHS = {"native": "", "portable": "#define TS_PORTABLE_HALF 1\n"}

LOOP = [
    "    #pragma omp simd",
    "    for (int64_t x1 = 0; x1 < red_len; ++x1) {",
    "      const float tmp0 = ts_f16_to_f32(buf_x[x1 + red_len*x0]);",
    "      const float tmp1 = ts_f16_to_f32(buf_w[x1]) * ts_f16_to_f32(buf_x[2*x1]);",
    "      buf_out[x1 + red_len*x0] = ts_store_f16(static_cast<float>(tmp0 * tmp1));",
    "    }",
]


def test_a_loop_that_loads_and_stores_fp16_contiguously_is_blocked():
    lines = block_half_loops(LOOP)
    text = "\n".join(lines)
    # whole blocks with a constant count, then the rest of the row once
    assert f"for (; x1_b + {HALF_BLOCK} <= red_len; x1_b += {HALF_BLOCK}) {{" in text
    assert "if (x1_b < red_len) {" in text
    assert f"const int64_t x1_n = {HALF_BLOCK};" in text
    assert "const int64_t x1_n = red_len - x1_b;" in text
    # each contiguous load widened once per block, the row-invariant weight too; the
    # strided load keeps its per-element conversion
    assert text.count("ts_f16_widen_block(&buf_x[x1_b + red_len*x0], wide0_x1, x1_n);") == 2
    assert text.count("ts_f16_widen_block(&buf_w[x1_b], wide1_x1, x1_n);") == 2
    assert "wide1_x1[x1 - x1_b] * ts_f16_to_f32(buf_x[2*x1])" in text
    # the store writes a float array that is narrowed after the lane loop
    assert "narrow0_x1[x1 - x1_b] = static_cast<float>(tmp0 * tmp1);" in text
    assert text.count("ts_f16_narrow_block(narrow0_x1, &buf_out[x1_b + red_len*x0], x1_n);") == 2
    assert "ts_store_f16" not in text
    assert text.count("#pragma omp simd") == 2
    assert lines[0] == "    {" and lines[-1] == "    }"


def test_literal_bounds_emit_only_the_blocks_that_run():
    whole = block_half_loops([line.replace("red_len", str(2 * HALF_BLOCK)) for line in LOOP])
    assert not any(line.strip().startswith("if (x1_b <") for line in whole)
    short = block_half_loops([line.replace("red_len", "5") for line in LOOP])
    assert not any(line.strip().startswith("for (; x1_b") for line in short)
    assert any(line.strip() == "const int64_t x1_n = 5 - x1_b;" for line in short)


def test_loops_with_nothing_to_move_or_not_plain_are_left_alone():
    strided = [
        *LOOP[:2],
        "      buf_out[2*x1] = ts_store_f16(ts_f16_to_f32(buf_x[3*x1]));",
        "    }",
    ]
    reduction = ["    #pragma omp simd reduction(+:acc)", *LOOP[1:]]
    nested = [*LOOP[:2], "      if (x1 > 3) {", "      }", *LOOP[2:]]
    bf16_strided = [*LOOP[:2], "      buf_out[2*x1] = ts_bf16_bits(tmp0);", "    }"]
    for lines in (strided, reduction, nested, bf16_strided):
        assert block_half_loops(lines) == lines


BF16_LOOP = [
    "    #pragma omp simd",
    "    for (int64_t x1 = 0; x1 < red_len; ++x1) {",
    "      const float tmp0 = ts_bf16_to_f32(buf_x[x1 + red_len*x0]);",
    "      const float tmp1 = ts_round_bf16(static_cast<float>(tmp0 * tmp0));",
    "      const float tmp2 = ts_round_bf16(static_cast<float>(tmp1 + tmp0));",
    "      buf_out[x1 + red_len*x0] = ts_bf16_bits(tmp2);",
    "      buf_sq[x1 + red_len*x0] = ts_f32_to_bf16(tmp0 * 3.0f);",
    "    }",
]


def test_bf16_stores_are_blocked_only_under_avx512_bf16():
    """Decision 0526: the blocked loop under ``#ifdef TS_AVX512BF16``, the loop as it was
    under ``#else``; a rounded value is narrowed from the float it rounded."""
    lines = block_half_loops(BF16_LOOP)
    assert lines[0] == "    #ifdef TS_AVX512BF16" and lines[-1] == "    #endif"
    other = lines.index("    #else")
    assert lines[other + 1 : -1] == BF16_LOOP
    blocked = "\n".join(lines[1:other])
    assert "narrow0_x1[x1 - x1_b] = static_cast<float>(tmp1 + tmp0);" in blocked
    assert "narrow1_x1[x1 - x1_b] = static_cast<float>(tmp0 * 3.0f);" in blocked
    assert (
        blocked.count("ts_bf16_narrow_block(narrow0_x1, &buf_out[x1_b + red_len*x0], x1_n);") == 2
    )
    assert blocked.count("ts_bf16_narrow_block(narrow1_x1, &buf_sq[x1_b + red_len*x0], x1_n);") == 2
    assert "ts_bf16_bits(" not in blocked and "ts_f32_to_bf16(" not in blocked
    # an fp16 load in the same loop is widened in both versions
    mixed = [*BF16_LOOP[:2], LOOP[2], *BF16_LOOP[2:]]
    lines = block_half_loops(mixed)
    other = lines.index("    #else")
    assert "ts_f16_widen_block(" in "\n".join(lines[other:])
    assert "ts_bf16_narrow_block(" not in "\n".join(lines[other:])


def _every_value_and_ties(dtype: torch.dtype) -> list[torch.Tensor]:
    """Every value of the 16-bit ``dtype`` as floats, each halfway to its neighbour (ties
    to even), and just above and below the halfway points."""
    every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype).float()
    finite = every[torch.isfinite(every)].sort().values
    ties = (finite[1:] + finite[:-1]) / 2
    above = torch.nextafter(ties, torch.tensor(float("inf")))
    below = torch.nextafter(ties, torch.tensor(-float("inf")))
    return [every, ties, above, below]


def _assert_narrows_as_torch(kernel, values: torch.Tensor, counts, dtype: torch.dtype) -> None:
    """``kernel(x, y, n)`` writes torch's ``dtype`` bits of the last ``count`` of
    ``values`` for each of ``counts`` (any NaN for a NaN)."""
    for count in counts:
        x = values[-count:].contiguous()
        y = torch.zeros(count, dtype=dtype)
        kernel(x.data_ptr(), y.data_ptr(), count)
        want = x.to(dtype)
        assert torch.equal(y.isnan(), want.isnan()), count
        finite = ~want.isnan()
        assert torch.equal(y[finite].view(torch.int16), want[finite].view(torch.int16)), count


def _narrowing_inputs() -> torch.Tensor:
    """Every fp16 value and the points around its ties (:func:`_every_value_and_ties`),
    overflow (65520 and up), the subnormal range, NaN and inf."""
    specials = torch.tensor([65504.0, 65519.99, 65520.0, 1e6, -1e30, 2.0**-25, 2.0**-26, 1e-40])
    nans = torch.tensor([0x7FC00001, 0xFF800001, 0x7F812345], dtype=torch.int64)
    nans = nans.to(torch.int32).view(torch.float32)
    return torch.cat([*_every_value_and_ties(torch.float16), specials, -specials, nans])


@pytest.mark.parametrize("path", PATHS)
def test_the_block_narrowing_rounds_as_torch_in_both_builds(tmp_path, path):
    """Counts that leave 8-, 1- and 15-value remainders after the 16-value steps."""
    source = (
        f"{PATHS[path]}{PRELUDE}{HALF_PRELUDE}{HALF_BLOCKS}\n"
        'extern "C" void narrow(const float* __restrict__ x, uint16_t* __restrict__ y, '
        "const int64_t n) { ts_f16_narrow_block(x, y, n); }\n"
    )
    kernel = build_kernel(source, "narrow", 3, tmp_path).fn
    kernel.argtypes = [*kernel.argtypes[:2], ctypes.c_int64]
    values = _narrowing_inputs()
    _assert_narrows_as_torch(kernel, values, (values.numel(), 24, 17, 15, 1), torch.float16)


def _bf16_narrowing_inputs() -> torch.Tensor:
    """Every bf16 value and the points around its ties (:func:`_every_value_and_ties`),
    float subnormals (which vcvtneps2bf16 would flush), rounding up to inf, NaN with
    payloads."""
    bits = [0x00000001, 0x00007FFF, 0x00008000, 0x00018000, 0x007FFFFF, 0x007F8000, 0x7F7FFFFF]
    bits += [0x7F7F7FFF, 0x7FC00001, 0xFF800001, 0x7F812345, 0x7FFFFFFF]
    specials = torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)
    return torch.cat([*_every_value_and_ties(torch.bfloat16), specials, -specials])


@pytest.mark.parametrize("path", PATHS)
def test_the_bf16_block_narrowing_rounds_as_torch_in_both_builds(tmp_path, path):
    """Counts that leave 1- and 15-value remainders after the 16-value steps; NaN stays
    NaN (torch writes one NaN for all, ts_f32_to_bf16 keeps the payload's top bits)."""
    source = (
        f"{PATHS[path]}{PRELUDE}{BF16_BLOCKS}\n"
        'extern "C" void narrow(const float* __restrict__ x, uint16_t* __restrict__ y, '
        "const int64_t n) { ts_bf16_narrow_block(x, y, n); }\n"
        'extern "C" int64_t fast(const float* x, uint16_t* y, int64_t n) {\n'
        "#ifdef TS_AVX512BF16\n  return 1;\n#else\n  return 0;\n#endif\n}\n"
    )
    library = build_kernel(source, "narrow", 3, tmp_path)
    kernel = library.fn
    kernel.argtypes = [*kernel.argtypes[:2], ctypes.c_int64]
    fast = ctypes.CDLL(str(library.path)).fast
    fast.restype = ctypes.c_int64
    assert fast(None, None, 0) == (path == "native" and host_has_avx512_bf16())
    values = _bf16_narrowing_inputs()
    _assert_narrows_as_torch(kernel, values, (values.numel(), 17, 15, 1), torch.bfloat16)


def host_has_avx512_bf16() -> bool:
    """Whether ``-march=native`` builds here target AVX512_BF16 (with BW and DQ) under GCC."""
    if "GCC" not in find_compiler().version and "g++" not in find_compiler().version:
        return False
    with open("/proc/cpuinfo") as handle:
        flags = next((line for line in handle if line.startswith("flags")), "").split()
    return {"avx512_bf16", "avx512bw", "avx512dq"} <= set(flags)


def _bf16_chain(rows: int, n: int):
    """(x * x + x) * y in bf16 as eager runs it: every op's result rounded to bf16."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, n), torch.bfloat16))
    y = b.input("y", TensorMeta((rows, n), torch.bfloat16))

    def op(name, *args):
        wide = [b.call(prim("convert_element_type"), a, torch.float32) for a in args]
        result = b.call(prim(name), *wide)
        return b.call(prim("convert_element_type"), result, torch.bfloat16)

    return b.build([op("mul", op("add", op("mul", x, x), x), y)])


@pytest.mark.parametrize("n", [HALF_BLOCK - 3, 3 * HALF_BLOCK, 4133])
def test_bf16_elementwise_kernels_narrow_blocks_and_equal_eager(ind, n):
    compiled = ind.compile(_bf16_chain(5, n), "cpp")
    (kernel,) = compiled.kernels
    body = ind.kernel_code(kernel.source)
    assert "#ifdef TS_AVX512BF16" in body
    assert "ts_bf16_narrow_block(narrow0_x1, &buf_" in body
    g = torch.Generator().manual_seed(n)
    x, y = (torch.randn(5, n, generator=g).mul(4).bfloat16() for _ in range(2))
    special = [float("nan"), float("inf"), -float("inf"), 1e-39, -3e-39, 9e-41, -0.0, 3e38]
    x[0, :8] = torch.tensor(special)
    y[0, :8] = torch.tensor([1.0, 1.0, 2.0, 1e-39, 0.5, 1.0, 0.0, 3e38])
    y[1, :4] = torch.tensor([1e-38, -1e-38, 7e-39, 1e-45])
    (got,) = compiled(x, y)
    want = (x * x + x) * y
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num().view(torch.int16), want.nan_to_num().view(torch.int16))


def _scaled_sum(rows: int, n: int):
    """((x + y) * 0.5 * w).to(fp16) with a row-invariant fp16 weight: float math that eager
    rounds the same way (no multiply-add to contract), one fp16 store."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, n), torch.float16))
    y = b.input("y", TensorMeta((rows, n), torch.float16))
    w = b.input("w", TensorMeta((n,), torch.float16))

    def wide(v):
        return b.call(prim("convert_element_type"), v, torch.float32)

    half = b.call(prim("mul"), b.call(prim("add"), wide(x), wide(y)), 0.5)
    ws = b.call(prim("broadcast_in_dim"), wide(w), (rows, n), (1,))
    out = b.call(prim("convert_element_type"), b.call(prim("mul"), half, ws), torch.float16)
    return b.build([out])


@pytest.mark.parametrize("n", [HALF_BLOCK - 3, 3 * HALF_BLOCK, 4133])
def test_fp16_elementwise_kernels_are_blocked_and_equal_eager(ind, n):
    compiled = ind.compile(_scaled_sum(5, n), "cpp")
    (kernel,) = compiled.kernels
    body = ind.kernel_code(kernel.source)
    assert "ts_f16_narrow_block(narrow0_x1, &buf_" in body
    assert "ts_f16_widen_block(&buf_w[x1_b], " in body
    assert "ts_f16_to_f32(buf_" not in body and "ts_store_f16(" not in body
    g = torch.Generator().manual_seed(n)
    x, y = (torch.randn(5, n, generator=g).mul(3e4).half() for _ in range(2))
    w = torch.randn(n, generator=g).half()
    x[0, :6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 6e-8, -0.0, 65504.0])
    y[0, :6] = torch.tensor([1.0, 1.0, 2.0, 6e-8, 0.0, 65504.0])
    (got,) = compiled(x, y, w)
    want = ((x.float() + y.float()) * 0.5 * w.float()).half()
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num(), want.nan_to_num()), int((got != want).sum())
