"""What Python code decides on a symbolic size becomes a guard of the capture (decision
0200): a branch on ``x.shape[0] > 20`` guards the side it took, ``T // 2`` stays a
symbolic size of the graph, and ``range(x.size(1))`` unrolls at the call's size and
guards it exactly; ``n % 2`` stays symbolic arithmetic."""

from __future__ import annotations

import torch

from torchstrata.capture import capture
from torchstrata.core import SymbolicSizes, graph_has_symbols, symbolic_scope


def branchy(x):
    if x.shape[0] > 20:
        return x[: x.shape[0] // 2] * 2
    return x.sum(0)


def loop_over_columns(x):
    total = x[:, 0]
    for i in range(1, x.size(1)):
        total = total + x[:, i] * i
    return total


def parity(x):
    if x.shape[0] % 2 == 0:
        return x.view(x.shape[0] // 2, -1).sum(1)
    return x[1:].view(-1, 2 * x.shape[1]).sum(1)


def _capture(fn, x):
    sizes = SymbolicSizes({"L['x']": [0, 1]})
    with symbolic_scope(sizes):
        result = capture(fn, (x,), {})
    return result, sizes


def test_a_branch_on_a_size_guards_the_side_it_took():
    taken, sizes = _capture(branchy, torch.randn(30, 4))
    assert "L['x'].size()[0] > 20" in sizes.describe_guards()
    (graph,) = taken.graphs
    assert graph_has_symbols(graph)
    # the slice's bound is the symbolic size halved, not the call's 15
    symbol = next(b.name for b in sizes.bindings if b.dim == 0)
    assert f"({symbol}//2)" in str(graph)
    _, sizes = _capture(branchy, torch.randn(8, 4))
    assert "L['x'].size()[0] <= 20" in sizes.describe_guards()


def test_a_loop_over_a_size_unrolls_and_guards_it_exactly():
    looped, sizes = _capture(loop_over_columns, torch.randn(5, 4))
    assert "Eq(L['x'].size()[1], 4)" in sizes.describe_guards()
    assert not any("size()[0]" in guard for guard in sizes.describe_guards())
    (graph,) = looped.graphs
    assert str(graph).count("torch.select") == 4  # one column read per iteration


def test_a_branch_on_a_remainder_keeps_the_size_symbolic():
    # n % 2 is symbolic arithmetic, guarded, not a size made plain
    even, sizes = _capture(parity, torch.randn(6, 3))
    assert "Eq(Mod(L['x'].size()[0], 2), 0)" in sizes.describe_guards()
    assert not any(guard.startswith("Eq(L['x'].size()[0]") for guard in sizes.describe_guards())
    assert graph_has_symbols(even.graphs[0])
