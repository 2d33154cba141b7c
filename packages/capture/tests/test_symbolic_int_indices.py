"""An ``int`` made symbolic (its size carrier planned, decision 0330) as a tensor index:
``x[:, n]`` selects at the symbol with its bounds guarded (decision 0366), and a
``chunk`` count specialises it (the number of outputs depends on it)."""

from __future__ import annotations

import torch

from torchstrata.capture import capture
from torchstrata.core import SymbolicSizes, graph_has_symbols, int_size_source, symbolic_scope


def column(x, n):
    return x[:, n].sin()


def from_the_end(x, n):
    return x[-n]


def chunks(x, n):
    return x.chunk(n, 1)


def _capture(fn, x, n):
    sizes = SymbolicSizes({int_size_source("L['n']"): [0]})
    with symbolic_scope(sizes):
        result = capture(fn, (x, n), {})
    return result, sizes


def test_a_select_at_a_symbolic_int_keeps_the_symbol_and_guards_its_bounds():
    result, sizes = _capture(column, torch.randn(4, 20), 3)
    assert not result.graph_breaks
    (graph,) = result.graphs
    assert graph_has_symbols(graph)
    assert "torch.select(%x, 1, s" in str(graph)
    guards = " ".join(sizes.describe_guards())
    assert "L['n']" in guards and "20" in guards  # n < 20 (its bound), not n == 3


def test_a_negative_symbolic_index_counts_from_the_end():
    result, _ = _capture(from_the_end, torch.randn(20, 4), 3)
    (graph,) = result.graphs
    assert "torch.select(%x, 0, 20 - s" in str(graph)


def test_a_chunk_count_specialises_the_int():
    result, _ = _capture(chunks, torch.randn(4, 20), 3)
    assert not result.graph_breaks
    (graph,) = result.graphs
    assert not graph_has_symbols(graph)  # three outputs: the count is a constant
    assert str(graph).count("builtin.getitem") == 3
