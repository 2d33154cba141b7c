"""C++ code paths: column reductions (reduce a strided dim into contiguous columns), selects."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim

COLUMN_LOOP = "for (int64_t c = 0; c < cn; ++c)"


def _column_sum(shape, dims, kind="sum", dtype=torch.float32, scale=True):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(shape, dtype))
    value = b.call(prim("mul"), x, 2) if scale else x
    return b.build([b.call(prim(kind), value, dims)])


def _source(compiled) -> str:
    return "\n".join(kernel.source for kernel in compiled.kernels)


@pytest.mark.parametrize("kind", ["sum", "amax", "amin", "prod"])
@pytest.mark.parametrize(
    ("shape", "dims"),
    [
        ((5, 9), (0,)),  # tiny: one block, one chunk, no threads
        ((37, 13), (0,)),  # odd sizes
        ((1, 16), (0,)),  # a single reduced row (no strided loads: reduced along rows)
        ((3000, 20), (0,)),  # enough work to split the reduced dim into chunks
        ((300, 1100), (0,)),  # two column blocks, each split into chunks
        ((4, 50, 24), (0, 1)),  # two reduced dims (a bias gradient over batch and time)
        ((3, 700, 33), (1,)),  # an outer row dim: groups x blocks x chunks
    ],
)
def test_column_reductions(ind, kind, shape, dims):
    # prod of thousands of values over/underflows identically in both: compare near 1.
    graph = _column_sum(shape, dims, kind, scale=kind != "prod")
    x = torch.randn(shape)
    if kind == "prod":
        x = 1 + x / 1000
    compiled = ind.check(graph, "cpp", inputs=[x], rtol=1e-4, atol=1e-4)
    assert (COLUMN_LOOP in _source(compiled)) == (shape[0] > 1)


def test_column_sum_of_nothing_is_zero(ind):
    ind.check(_column_sum((0, 16), (0,)), "cpp")
    ind.check(_column_sum((3, 0, 16), (1,)), "cpp")


def test_narrow_columns_reduce_along_rows(ind):
    compiled = ind.check(_column_sum((40, 4), (0,)), "cpp")
    assert COLUMN_LOOP not in _source(compiled)


@pytest.mark.parametrize("kind", ["amax", "amin"])
@pytest.mark.parametrize("shape", [(7, 10), (4000, 12)])
def test_column_max_propagates_nan_and_infinities(ind, kind, shape):
    x = torch.randn(shape)
    x[shape[0] // 2, 1] = float("nan")
    x[0, 2] = float("inf")
    x[-1, 3] = float("-inf")
    x[:, 4] = float("-inf")
    x[:, 5] = float("nan")
    compiled = ind.check(_column_sum(shape, (0,), kind), "cpp", inputs=[x])
    assert COLUMN_LOOP in _source(compiled)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("kind", ["sum", "amax"])
def test_integer_column_reductions(ind, dtype, kind):
    ind.check(_column_sum((2500, 17), (0,), kind, dtype, scale=False), "cpp")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_column_reductions_in_other_float_types(ind, dtype):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((900, 40), dtype))
    wide = b.call(prim("convert_element_type"), x, torch.float32)
    total = b.call(prim("convert_element_type"), b.call(prim("sum"), wide, (0,)), dtype)
    ind.check(b.build([total]), "cpp", rtol=1e-2, atol=1e-2)


def test_weight_gradient_with_broadcast_row_statistics(ind):
    # LayerNorm's dW, db: sum over rows of dy * (x - mean[m]) * rstd[m], and of dy.
    m, n = 1500, 96
    b = GraphBuilder(Level.PRIMS)
    dy = b.input("dy", TensorMeta((m, n), torch.float32))
    x = b.input("x", TensorMeta((m, n), torch.float32))
    mean = b.input("mean", TensorMeta((m, 1), torch.float32))
    rstd = b.input("rstd", TensorMeta((m,), torch.float32))
    mean_b = b.call(prim("broadcast_in_dim"), mean, (m, n), (0, 1))
    rstd_b = b.call(prim("broadcast_in_dim"), rstd, (m, n), (0,))
    xhat = b.call(prim("mul"), b.call(prim("sub"), x, mean_b), rstd_b)
    dw = b.call(prim("sum"), b.call(prim("mul"), dy, xhat), (0,))
    db = b.call(prim("sum"), dy, (0,))
    # an epilogue on the reduced values, stored next to them
    norm = b.call(prim("sqrt"), b.call(prim("abs"), b.call(prim("add"), dw, db)))
    compiled = ind.check(b.build([dw, db, norm]), "cpp", rtol=1e-4, atol=1e-3)
    assert len(compiled.kernels) == 1
    assert COLUMN_LOOP in _source(compiled)


def test_column_reduction_of_a_transposed_input_reduces_along_rows(ind):
    # x is [n, m] in memory, read as [m, n]: the reduced dim is the contiguous one.
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((300, 64), torch.float32, strides=(1, 300)))
    compiled = ind.check(b.build([b.call(prim("sum"), x, (0,))]), "cpp", rtol=1e-4, atol=1e-4)
    assert COLUMN_LOOP not in _source(compiled)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64])
def test_where_selects_specials_without_branches(ind, dtype):
    # The select is bitwise: NaN, infinities and -0.0 must pass through untouched.
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((3, 40), dtype))
    y = b.input("y", TensorMeta((3, 40), dtype))
    picked = b.call(prim("where"), b.call(prim("gt"), x, y), x, y)
    out = [picked, b.call(prim("maximum"), x, y), b.call(prim("minimum"), x, y)]
    if dtype.is_floating_point:
        out.append(b.call(prim("exp"), picked))  # a math call in the same loop
    xs, ys = torch.randn(3, 40).to(dtype), torch.randn(3, 40).to(dtype)
    if dtype.is_floating_point:
        xs[0, :4] = torch.tensor([float("nan"), float("inf"), -0.0, 1.0])
        ys[0, :4] = torch.tensor([1.0, float("nan"), 0.0, float("-inf")])
    ind.check(b.build(out), "cpp", inputs=[xs, ys])
