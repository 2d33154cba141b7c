"""Reduction kernels: row fusion, other dims, NaN propagation."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim


def _reduce(kind, shape, dims, dtype=torch.float32, strides=None):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(shape, dtype, strides=strides))
    return b.build(
        [b.call(prim(kind), b.call(prim("mul"), x, 2) if dtype.is_floating_point else x, dims)]
    )


@pytest.mark.parametrize("kind", ["sum", "amax", "amin", "prod"])
@pytest.mark.parametrize(
    ("shape", "dims"),
    [
        ((5, 9), (1,)),
        ((5, 9), (0,)),
        ((2, 3, 4), (0, 2)),
        ((6, 7), (0, 1)),
        ((3, 0), (0,)),
        ((4, 1), (1,)),
    ],
)
def test_reductions(ind, codegen, kind, shape, dims):
    if kind in ("amax", "amin") and any(shape[d] == 0 for d in dims):
        pytest.skip("torch refuses max/min over empty dims")
    compiled = ind.check(_reduce(kind, shape, dims), codegen)
    assert len(compiled.kernels) <= 1


def test_integer_sum(ind, codegen):
    ind.check(_reduce("sum", (4, 33), (1,), torch.int32), codegen)
    ind.check(_reduce("amax", (4, 33), (1,), torch.int64), codegen)


def test_max_propagates_nan(ind, codegen):
    graph = _reduce("amax", (3, 4), (1,))
    x = torch.randn(3, 4)
    x[1, 2] = float("nan")
    out = ind.compile(graph, codegen)(x)[0]
    assert torch.isnan(out[1]) and not torch.isnan(out[0]) and not torch.isnan(out[2])


def test_reduction_with_prologue_and_epilogue_outputs(ind, codegen):
    # y = x * 2 (an output too), s = sum(y, -1), z = y / s: one kernel, two outputs.
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((6, 10), torch.float32))
    y = b.call(prim("mul"), x, 2.0)
    s = b.call(prim("sum"), y, (1,))
    z = b.call(prim("div"), y, b.call(prim("broadcast_in_dim"), s, (6, 10), (0,)))
    compiled = ind.check(b.build([y, z, b.call(prim("sqrt"), b.call(prim("abs"), s))]), codegen)
    assert len(compiled.kernels) == 1


def test_layer_norm_like_is_one_kernel(ind, codegen):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((5, 33), torch.float32))
    mean = b.call(prim("div"), b.call(prim("sum"), x, (1,)), 33.0)
    centered = b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), mean, (5, 33), (0,)))
    var = b.call(
        prim("div"), b.call(prim("sum"), b.call(prim("mul"), centered, centered), (1,)), 33.0
    )
    rstd = b.call(prim("rsqrt"), b.call(prim("add"), var, 1e-5))
    out = b.call(prim("mul"), centered, b.call(prim("broadcast_in_dim"), rstd, (5, 33), (0,)))
    compiled = ind.check(b.build([out]), codegen)
    assert len(compiled.kernels) == 1


def test_reduction_read_at_another_row_is_materialised(ind, codegen):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 8), torch.float32))
    s = b.call(prim("sum"), x, (1,))  # [4]
    flipped = b.call(prim("slice"), s, (1,), (4,), (1,))  # [3]: rows 1..3
    other = b.call(prim("slice"), x, (0, 0), (3, 8), (1, 1))
    out = b.call(prim("mul"), other, b.call(prim("broadcast_in_dim"), flipped, (3, 8), (0,)))
    compiled = ind.check(b.build([out]), codegen)
    assert len(compiled.kernels) == 2
