"""Decomposing an ATen graph whose sizes are symbolic (decision 0280): the prims graph
keeps them symbolic, a decision on a size is a condition recorded in the ShapeEnv (never
a size specialised silently), and the graph made static at any size that meets those
conditions computes what the static graph's decomposition computes."""

from __future__ import annotations

import torch

from torchstrata.core import (
    GraphBuilder,
    Level,
    SymbolicSizes,
    aten,
    concretize_graph,
    graph_symbols,
    input_meta,
    interpret,
    rebind_graph,
    symbolic_scope,
)
from torchstrata.decomp import decompose

INT_MAX = 9223372036854775807


def _sliced_means():
    """``x [n, 8]``, ``n`` symbolic: the mean of ``x[1:]`` and of ``x[-3:]`` over rows and
    the mean of everything (counts over the symbolic dim, slice bounds clamped to it)."""
    sizes = SymbolicSizes({"L['x']": [0]})
    builder = GraphBuilder(Level.ATEN)
    with symbolic_scope(sizes):
        x = builder.input("x", input_meta("L['x']", torch.randn(16, 8)))
        tail = builder.call(aten("slice.Tensor"), x, 0, 1, INT_MAX)
        last = builder.call(aten("slice.Tensor"), x, 0, -3, INT_MAX)
        rows = builder.call(aten("mean.dim"), tail, [0])
        lasts = builder.call(aten("mean.dim"), last, [0])
        total = builder.call(aten("mean.default"), x)
        graph = builder.build([rows, lasts, total])
    (symbol,) = graph_symbols(graph)
    return graph, symbol


def test_counts_and_slice_bounds_stay_symbolic():
    graph, symbol = _sliced_means()
    sizes = SymbolicSizes({})
    rebound = rebind_graph(graph, sizes)
    with symbolic_scope(sizes):
        prims = decompose(rebound)
    conditions = sizes.guard_exprs()
    # ``float(count)`` and ``slice.indices`` specialised the size: Eq(n, 16)
    assert not any("Eq" in str(expr) for expr in conditions), conditions
    assert symbol in graph_symbols(prims)
    for n in (16, 17, 5, 40):
        values = {symbol: n}
        x = torch.randn(n, 8)
        static = decompose(concretize_graph(graph, values))
        got = interpret(concretize_graph(prims, values), x)
        want = interpret(static, x)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b)
        torch.testing.assert_close(got[0], x[1:].mean(0))
        torch.testing.assert_close(got[1], x[-3:].mean(0))


def test_an_arange_from_a_symbolic_size_stays_symbolic():
    # ``torch.arange(n - 1, -1, -1)``: int() of its start specialised the size
    sizes = SymbolicSizes({"L['x']": [0]})
    builder = GraphBuilder(Level.ATEN)
    with symbolic_scope(sizes):
        x = builder.input("x", input_meta("L['x']", torch.randn(16, 4)))
        n = x.tensor_meta.shape[0]
        rows = builder.call(
            aten("arange.start_step"), n - 1, -1, -1, dtype=torch.int64, device=torch.device("cpu")
        )
        graph = builder.build([builder.call(aten("index_select.default"), x, 0, rows)])
    (symbol,) = graph_symbols(graph)
    fresh = SymbolicSizes({})
    rebound = rebind_graph(graph, fresh)
    with symbolic_scope(fresh):
        prims = decompose(rebound)
    assert not any("Eq" in str(expr) for expr in fresh.guard_exprs()), fresh.guard_exprs()
    for n in (16, 5, 33):
        x = torch.randn(n, 4)
        (got,) = interpret(concretize_graph(prims, {symbol: n}), x)
        torch.testing.assert_close(got, x.flip(0))
