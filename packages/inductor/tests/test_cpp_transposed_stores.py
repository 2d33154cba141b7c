"""C++ stores across the walked order go through 8x8 register transposes (decision 0372)."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim


def _relu_sum_row_major(shape, dtype=torch.float32):
    """``relu(a + b)`` of channels-last ``a`` and ``b``, stored row-major: the kernel walks
    channels-last (decision 0370) and stores across the channels."""
    _, c, h, w = shape
    strides = (c * h * w, 1, w * c, c)
    b = GraphBuilder(Level.PRIMS)
    x = b.input("a", TensorMeta(shape, dtype, strides=strides))
    y = b.input("b", TensorMeta(shape, dtype, strides=strides))
    graph = b.build([b.call(prim("maximum"), b.call(prim("add"), x, y), 0.0)])
    inputs = [torch.randn(shape, dtype=dtype).to(memory_format=torch.channels_last) for _ in "ab"]
    return graph, inputs


def _body(compiled) -> str:
    """The kernel's functions after its prelude: the function over a range of tiles
    (decision 0391), else the kernel's own."""
    source = compiled.kernels[0].source
    start = source.find("static void __attribute__((noinline")
    return source[start:] if start >= 0 else source.split('extern "C" void')[-1]


@pytest.mark.parametrize("shape", [(1, 16, 4, 6), (2, 8, 4, 8), (1, 32, 8, 8)])
def test_rows_in_tiles_transposed_into_the_row_major_store(ind, shape):
    graph, inputs = _relu_sum_row_major(shape)
    compiled = ind.check(graph, "cpp", inputs=inputs)
    body = _body(compiled)
    assert "ts_transpose8(tile0 + " in body
    (out,) = compiled(*inputs)
    assert out.stride() == torch.empty(shape).stride()
    assert torch.equal(out, torch.relu(inputs[0] + inputs[1]))


@pytest.mark.parametrize(
    "shape, dtype",
    [
        ((1, 16, 5, 5), torch.float32),  # 25 rows walked: no whole tiles
        ((1, 12, 4, 6), torch.float32),  # 12 channels: no 8x8 blocks
        ((1, 16, 4, 6), torch.float64),  # not a 32-bit store
    ],
)
def test_stores_without_whole_tiles_stay_strided(ind, shape, dtype):
    graph, inputs = _relu_sum_row_major(shape, dtype)
    compiled = ind.check(graph, "cpp", inputs=inputs)
    assert "ts_transpose8" not in compiled.kernels[0].source


def test_the_transpose_helper_matches_a_scalar_transpose(ind):
    """Every lane of the 8x8 transpose lands where a scalar transpose puts it: a
    [1, 8, 8, 8] value whose elements are their own positions."""
    graph, _ = _relu_sum_row_major((1, 8, 8, 8))
    positions = torch.arange(512, dtype=torch.float32).reshape(1, 8, 8, 8)
    a = positions.contiguous(memory_format=torch.channels_last)
    compiled = ind.compile(graph, "cpp")
    assert "ts_transpose8" in _body(compiled)
    (out,) = compiled(a, torch.zeros_like(a))
    assert torch.equal(out, positions)


def test_one_source_serves_tiles_on_both_sides_of_the_parallel_threshold(ind):
    """Whether the tiles run in parallel is decided when called (decision 0391): batches of
    2, 7 and 8 (16 channels of 16x16: 8192, 28672 and 32768 elements, the last from
    ``PARALLEL_THRESHOLD``) are one source, each equal to eager."""
    sources = set()
    for batch in (2, 7, 8):
        graph, inputs = _relu_sum_row_major((batch, 16, 16, 16))
        compiled = ind.check(graph, "cpp", inputs=inputs)
        (out,) = compiled(*inputs)
        assert torch.equal(out, torch.relu(inputs[0] + inputs[1]))
        sources.add(compiled.kernels[0].source)
    (source,) = sources
    assert "ts_transpose8(tile0 + " in source and "if (rows * 16 >= 32768) {" in source
