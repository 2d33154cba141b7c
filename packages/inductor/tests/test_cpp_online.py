"""C++ chunked online max + sum of exp on long rows: same results as the two-pass loops."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim

CHUNKED_LOOP = "r0_start += "


def _source(compiled) -> str:
    return "\n".join(kernel.source for kernel in compiled.kernels)


def _logsumexp_parts(shape, dtype=torch.float32, extra_sum=False):
    """Outputs: row max, row sum of exp(x - max), log-softmax (and the row sum of x)."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(shape, dtype))
    if dtype != torch.float32 and dtype != torch.float64:
        x = b.call(prim("convert_element_type"), x, torch.float32)
    last, keep = (len(shape) - 1,), tuple(range(len(shape) - 1))
    peak = b.call(prim("amax"), x, last)
    shifted = b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), peak, shape, keep))
    total = b.call(prim("sum"), b.call(prim("exp"), shifted), last)
    log_total = b.call(prim("broadcast_in_dim"), b.call(prim("log"), total), shape, keep)
    outputs = [peak, total, b.call(prim("sub"), shifted, log_total)]
    if extra_sum:
        outputs.append(b.call(prim("sum"), x, last))
    return b.build(outputs)


def _special_rows(rows: int, n: int, dtype=torch.float32) -> torch.Tensor:
    """Random rows, then rows with NaN, +inf, all -inf, -inf in whole chunks, huge values."""
    generator = torch.Generator().manual_seed(rows * 100003 + n)
    x = torch.randn(rows, n, dtype=torch.float64, generator=generator) * 4
    x[0, n // 3] = float("nan")
    x[1, n - 1] = float("inf")
    x[2] = float("-inf")
    x[3, : n // 2] = float("-inf")  # the first chunks see only -inf
    x[4, n // 2 :] = float("-inf")
    x[5] += 80  # exp(x) overflows fp32 unless shifted
    x[6, 0] = 1e4  # the max sits in the first chunk; later chunks add ~0
    x[7, -1] = 1e4  # the max grows in the last (partial) chunk
    return x.to(dtype)


@pytest.mark.parametrize("n", [8193, 10007, 32000])
def test_long_rows_use_one_chunked_loop(ind, n):
    graph = _logsumexp_parts((9, n))
    compiled = ind.check(graph, "cpp", inputs=[_special_rows(9, n)], rtol=1e-5, atol=1e-5)
    source = _source(compiled)
    assert CHUNKED_LOOP in source
    body = ind.kernel_code(ind.serial_rows(source))
    # the chunk's terms (whole sets of sum lanes, then a partial one) and the rescale:
    # no other pass
    assert body.count("ts_exp_f32(") == 3


def test_softmax_on_long_rows(ind):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((8, 20000), torch.float32))
    graph = b.build([ind.softmax_last(b, x)])
    compiled = ind.check(graph, "cpp", inputs=[_special_rows(8, 20000)], rtol=1e-5, atol=1e-6)
    assert CHUNKED_LOOP in _source(compiled)


def test_other_reductions_share_the_chunked_loop(ind):
    graph = _logsumexp_parts((10, 9000), extra_sum=True)
    compiled = ind.check(graph, "cpp", inputs=[_special_rows(10, 9000)], rtol=1e-4, atol=1e-3)
    source = _source(compiled)
    assert CHUNKED_LOOP in source
    # one reduction loop: the chunk's max with the sum of x (the chunk's exps add into
    # lane arrays, in loops without a reduction clause)
    assert ind.serial_rows(source).count("#pragma omp simd reduction") == 1


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_chunked_loop_in_other_float_types(ind, dtype):
    # Sums of 12345 float32 terms in another order than the reference: float32 tolerances.
    graph = _logsumexp_parts((8, 12345), dtype)
    compiled = ind.check(
        graph, "cpp", inputs=[_special_rows(8, 12345, dtype)], rtol=1e-5, atol=1e-5
    )
    assert CHUNKED_LOOP in _source(compiled)


def test_rows_that_fit_the_row_cache_keep_two_loops(ind):
    compiled = ind.check(_logsumexp_parts((9, 4096)), "cpp", inputs=[_special_rows(9, 4096)])
    assert CHUNKED_LOOP not in _source(compiled)


def _max_and_sum_of_exp(shape, dims, keep):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(shape, torch.float32))
    peak = b.call(prim("amax"), x, dims)
    wide = b.call(prim("broadcast_in_dim"), peak, shape, keep)
    total = b.call(prim("sum"), b.call(prim("exp"), b.call(prim("sub"), x, wide)), dims)
    return b.build([peak, total])


def test_reductions_over_two_strided_dims_keep_two_loops(ind):
    graph = _max_and_sum_of_exp((100, 4, 100), (0, 2), (1,))
    compiled = ind.check(graph, "cpp", rtol=1e-5, atol=1e-5)
    assert CHUNKED_LOOP not in _source(compiled)


def test_reductions_over_two_contiguous_dims_are_one_long_row(ind):
    """``(100, 100)`` reduced dims walked as one of 10000 (decision 0310): a long row."""
    graph = _max_and_sum_of_exp((4, 100, 100), (1, 2), (0,))
    compiled = ind.check(graph, "cpp", rtol=1e-5, atol=1e-5)
    assert CHUNKED_LOOP in _source(compiled) and "red_len" in _source(compiled)
