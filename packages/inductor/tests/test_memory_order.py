"""Pointwise kernels walk their domain in their output's memory order."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim

CHANNELS_LAST = (200, 1, 40, 8)  # [2, 8, 5, 5]


def _relu_times_two(strides: tuple[int, ...]):
    """``relu(x) * 2`` over a [2, 8, 5, 5] ``x`` with ``strides``, its result stored with
    the same strides (as the decomposition lays out eager's channels-last results)."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((2, 8, 5, 5), torch.float32, strides=strides))
    y = b.call(prim("mul"), b.call(prim("maximum"), x, 0.0), 2.0)
    y = b.relayout(y, strides)
    return b.build([y])


def _store_coefficients(kernel) -> dict[str, int]:
    (store,) = kernel.full_stores or kernel.row_stores
    assert store.index.const == 0
    return {atom.name: coeff for atom, coeff in store.index.terms}


def test_a_channels_last_kernel_walks_channels_innermost(ind):
    """Its flat index splits row-major over (N, H, W, C): consecutive lanes store to
    consecutive addresses, as in a contiguous kernel."""
    kernel = ind.only_kernel(_relu_times_two(CHANNELS_LAST))
    assert kernel.row_shape == (2, 5, 5, 8)
    assert _store_coefficients(kernel) == {"x0": 200, "x1": 40, "x2": 8, "x3": 1}


def test_row_major_and_permuted_layouts(ind):
    row_major = ind.only_kernel(_relu_times_two((200, 25, 5, 1)))
    assert row_major.row_shape == (2, 8, 5, 5)
    assert _store_coefficients(row_major) == {"x0": 200, "x1": 25, "x2": 5, "x3": 1}
    odd = ind.only_kernel(_relu_times_two((1, 2, 80, 16)))  # N fastest, then C, W, H
    assert odd.row_shape == (5, 5, 8, 2)
    assert _store_coefficients(odd) == {"x0": 80, "x1": 16, "x2": 2, "x3": 1}


@pytest.mark.parametrize("strides", [CHANNELS_LAST, (200, 25, 5, 1), (1, 2, 80, 16)])
def test_relaid_pointwise_kernels_match_the_reference(ind, codegen, strides):
    graph = _relu_times_two(strides)
    x = torch.empty_strided((2, 8, 5, 5), strides).copy_(torch.randn(2, 8, 5, 5))
    (out,) = ind.check(graph, codegen, inputs=[x])(x)
    assert out.stride() == strides


def test_an_empty_domain_keeps_its_order(ind):
    """A zero-size dimension has no place among the strides (a split's empty piece of a
    transposed tensor failed to build before)."""
    from torchstrata.inductor.schedule.memory_order import row_order

    assert row_order((5, 0, 5), (), [], {}) == (0, 1, 2)
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((5, 0, 5), torch.float32, strides=(1, 25, 5)))
    y = b.relayout(b.call(prim("exp"), x), (1, 25, 5))
    graph = b.build([y])
    (out,) = ind.compile(graph, "cpp")(torch.empty_strided((5, 0, 5), (1, 25, 5)))
    assert out.shape == (5, 0, 5)


def test_reduction_kernels_keep_their_row_order(ind):
    """Only pointwise kernels are reordered; a softmax keeps its rows and reductions."""
    kernel = ind.only_kernel(ind.softmax_rows(8, 32, torch.float32))
    assert kernel.row_shape == (8,)
    assert kernel.red_shape == (32,)


def _sum_into_row_major(shape, strides_a, strides_b):
    """``relu(a + b)`` stored row-major, ``a`` and ``b`` laid out with the given strides."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("a", TensorMeta(shape, torch.float32, strides=strides_a))
    y = b.input("b", TensorMeta(shape, torch.float32, strides=strides_b))
    return b.build([b.call(prim("maximum"), b.call(prim("add"), x, y), 0.0)])


def test_row_major_output_of_channels_last_operands_walks_channels_last(ind):
    """Its full-size operands all channels-last, the kernel walks their order (contiguous
    loads) and stores across the short channel dim (decision 0370)."""
    graph = _sum_into_row_major((2, 8, 5, 5), CHANNELS_LAST, CHANNELS_LAST)
    kernel = ind.only_kernel(graph)
    assert kernel.row_shape == (2, 5, 5, 8)
    assert _store_coefficients(kernel) == {"x0": 200, "x1": 5, "x2": 1, "x3": 25}
    a, c = (torch.randn(2, 8, 5, 5).to(memory_format=torch.channels_last) for _ in range(2))
    (out,) = ind.check(graph, "cpp", inputs=[a, c])(a, c)
    assert out.stride() == (200, 25, 5, 1)


@pytest.mark.parametrize(
    "shape, strides_b",
    [
        ((2, 8, 5, 5), (200, 25, 5, 1)),  # one operand row-major: its order is kept
        ((1, 512, 3, 3), (4608, 1, 1536, 512)),  # 512 channels: a store line comes back late
    ],
)
def test_row_major_output_keeps_its_order(ind, shape, strides_b):
    _, c, h, w = shape
    graph = _sum_into_row_major(shape, (c * h * w, 1, w * c, c), strides_b)
    kernel = ind.only_kernel(graph)
    assert kernel.row_shape == shape
