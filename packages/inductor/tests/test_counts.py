"""Counts of boolean masks summed in int32 (``counts.narrow_counts``), the same values."""

from __future__ import annotations

import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.passes.counts import narrow_counts


def _count_positive(shape: tuple[int, ...], dims: tuple[int, ...]):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(shape, torch.float32))
    hit = b.call(prim("gt"), x, 0.0)
    count = b.call(prim("sum"), b.call(prim("convert_element_type"), hit, torch.int64), dims)
    return b.build([count])


def _sum_dtypes(graph) -> list[torch.dtype]:
    return [n.tensor_meta.dtype for n in graph.nodes if n.op == prim("sum")]


def test_counts_of_masks_accumulate_in_int32():
    graph = narrow_counts(_count_positive((6, 1000), (1,)))
    assert _sum_dtypes(graph) == [torch.int32]
    assert graph.outputs[0].tensor_meta.dtype is torch.int64


def test_counts_that_could_reach_2_to_the_31_stay_int64():
    graph = _count_positive((2, 2**31), (1,))
    assert narrow_counts(graph) is graph
    assert _sum_dtypes(narrow_counts(_count_positive((2**31, 2), (1,)))) == [torch.int32]


def test_narrowed_counts_match_the_reference(ind, codegen):
    graph = _count_positive((7, 3001), (1,))
    x = torch.randn(7, 3001)
    x[3] = 1.0  # a row all counted
    x[5] = -1.0  # and one with nothing
    (count,) = ind.check(graph, codegen, inputs=[x]).fn(x)
    assert count.dtype is torch.int64 and count[3] == 3001 and count[5] == 0
