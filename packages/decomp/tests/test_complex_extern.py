"""ATen nodes that touch complex values stay extern ATen calls, with their reason; the
real ops around them still lower to prims."""

from __future__ import annotations

import torch

from torchstrata.core import (
    COMPLEX_REASON,
    GraphBuilder,
    Level,
    OpKind,
    TensorMeta,
    aten,
    interpret,
    verify,
)
from torchstrata.decomp import decompose_with_stats

C64 = torch.complex64


def test_complex_abs_stays_aten_and_its_real_result_feeds_prims():
    builder = GraphBuilder(Level.ATEN)
    x = builder.input("x", TensorMeta((3, 4), torch.float32))
    z = builder.input("z", TensorMeta((3, 4), C64))
    magnitude = builder.call(aten("abs.default"), z)
    total = builder.call(aten("add.Tensor"), x, magnitude)
    rotated = builder.call(aten("mul.Tensor"), z, 2j)
    graph = builder.build([total, rotated])
    prims, stats = decompose_with_stats(graph)
    verify(prims)
    aten_nodes = [n for n in prims.nodes if n.op.kind is OpKind.ATEN]
    assert [n.op.name for n in aten_nodes] == ["aten.abs.default", "aten.mul.Tensor"]
    assert aten_nodes[0].tensor_meta.dtype == torch.float32
    assert all(not n.tensor_meta.dtype.is_complex for n in prims.nodes if n.op.kind is OpKind.PRIMS)
    assert stats.reasons == {
        "aten.abs.default": COMPLEX_REASON,
        "aten.mul.Tensor": COMPLEX_REASON,
    }
    assert not stats.missing()  # kept for a reason, not for want of a rule
    inputs = (torch.randn(3, 4), torch.randn(3, 4, dtype=C64))
    for got, want in zip(interpret(prims, *inputs), interpret(graph, *inputs), strict=True):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)


def test_lazy_negation_lowers_to_a_computed_negation(dh):
    prims = dh.check(dh.one_op("_neg_view.default", dh.T(3, 4)))
    assert [op.name for op in prims.ops()] == ["prims.neg"]
