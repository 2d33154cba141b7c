"""An extern operand that views a graph input in the input's own layout (a weight's
``t(t(w))`` in a backward) is the input itself in the launcher: no ``as_strided`` call."""

from __future__ import annotations

import torch

from torchstrata.core import CompileOptions, GraphBuilder, Level, TensorMeta, aten, prim
from torchstrata.inductor import compile_graph


def _graph(inner: list[int], outer: list[int]):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((3, 4), torch.float32))
    w = b.input("w", TensorMeta((4, 4), torch.float32))
    twice = b.call(prim("permute"), b.call(prim("permute"), w, inner), outer)
    return b.build([b.call(aten("mm.default"), x, twice)])


def _run(ind, graph):
    options = CompileOptions(codegen=ind.backend("cpp"), cache_dir=ind.cache_dir)
    compiled = compile_graph(graph, "cpu", options)
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    (got,) = compiled(x, w)
    return compiled.launcher_source, got, x, w


def test_a_view_of_an_input_in_its_own_layout_is_the_input(ind):
    source, got, x, w = _run(ind, _graph([1, 0], [1, 0]))
    assert "as_strided" not in source and "the input itself" in source
    torch.testing.assert_close(got, x @ w)


def test_a_transposed_view_of_an_input_stays_a_view(ind):
    source, got, x, w = _run(ind, _graph([1, 0], [0, 1]))
    assert "as_strided" in source
    torch.testing.assert_close(got, x @ w.t())
