"""Offsets past 2**31 elements in kernels whose domain is small: the index is computed in
int64 there (in int32 it wrapped around and read outside the buffer)."""

from __future__ import annotations

import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.triton.printer import render_index
from torchstrata.inductor.ir.indexing import Index, Var

SIDE = 46341  # SIDE**2 > 2**31


def test_an_index_past_int32_is_rendered_in_int64():
    x0 = Var("x0", SIDE)
    narrow = Index.of(x0) * 46340 + 1
    wide = Index.of(x0) * SIDE + (SIDE - 1)
    assert ".to(tl.int64)" not in render_index(narrow)  # its largest value fits in int32
    assert render_index(wide) == f"{SIDE}*x0.to(tl.int64) + {SIDE - 1}"
    assert ".to(tl.int64)" in render_index(Index.of(x0) * -(2 * SIDE))


def test_a_column_of_a_tensor_past_int32_elements(ind, codegen):
    """Read and write the last column of a 2.1 GB int8 tensor: 46341 elements at offsets up
    to 2**31 + 4632."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((SIDE, SIDE), torch.int8))
    column = b.call(prim("slice"), x, (0, SIDE - 1), (SIDE, SIDE), (1, 1))
    b_out = b.call(prim("add"), column, 1)
    graph = b.build([b_out])
    x_value = torch.zeros(SIDE, SIDE, dtype=torch.int8)
    x_value[:, -1] = (torch.arange(SIDE) % 100).to(torch.int8)
    compiled = ind.compile(graph, codegen)
    (got,) = compiled(x_value)
    torch.testing.assert_close(got.reshape(-1), x_value[:, -1] + 1)
