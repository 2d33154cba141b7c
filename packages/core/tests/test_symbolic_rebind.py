"""Moving a symbolic graph into a fresh ShapeEnv (decision 0220): the same symbol names,
the capture's hints or given ones, the capture's ShapeEnv untouched by decisions taken
in the new one; and ``SymbolicAot``'s checks of the conditions a trace relied on."""

from __future__ import annotations

import pytest
import sympy
import torch

from torchstrata.core import (
    GraphBuilder,
    Level,
    SizeOutsideTrace,
    SymbolicAot,
    SymbolicSizes,
    concretize_graph,
    input_meta,
    rebind_graph,
    symbol_hints,
    symbolic_scope,
    torch_op,
)


def _graph():
    sizes = SymbolicSizes({"L['x']": [0]})
    builder = GraphBuilder(Level.TORCH)
    with symbolic_scope(sizes):
        meta = input_meta("L['x']", torch.randn(16, 8))
        x = builder.input("x", meta)
        y = builder.call(torch_op(torch.narrow), x, 0, 0, meta.shape[0] // 2)
        graph = builder.build([builder.call(torch_op(torch.sigmoid), y)])
    return sizes, graph


def test_rebinding_keeps_names_and_moves_decisions_to_the_new_shape_env():
    sizes, graph = _graph()
    (symbol,) = (binding.name for binding in sizes.bindings)
    before = sizes.guard_exprs()
    fresh = SymbolicSizes({})
    rebound = rebind_graph(graph, fresh)
    assert str(rebound) == str(graph)
    assert symbol_hints(rebound) == {symbol: 16}
    size = rebound.inputs[0].meta.shape[0]
    assert size.node.shape_env is fresh.shape_env
    assert not bool(size > 20)  # a decision on a size, recorded by the new ShapeEnv only
    assert [str(e) for e in fresh.guard_exprs()] == [f"{symbol} <= 20"]
    assert sizes.guard_exprs() == before
    assert str(concretize_graph(rebound, {symbol: 7})) == str(concretize_graph(graph, {symbol: 7}))


def test_rebinding_at_other_hints():
    sizes, graph = _graph()
    (symbol,) = (binding.name for binding in sizes.bindings)
    fresh = SymbolicSizes({})
    rebound = rebind_graph(graph, fresh, {symbol: 40})
    assert symbol_hints(rebound) == {symbol: 40}
    assert bool(rebound.inputs[0].meta.shape[0] > 20)  # decided at 40, not at 16
    assert [str(e) for e in fresh.guard_exprs()] == [f"{symbol} > 20"]


def test_a_symbolic_aot_serves_only_sizes_meeting_its_conditions():
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    conditions = (s0 < 16, sympy.Eq(sympy.Mod(s0, 2), 0))
    traced = SymbolicAot(None, conditions, lambda values: values["s0"])  # type: ignore[arg-type]
    assert traced.at({"s0": 6}) == 6
    assert traced.violated({"s0": 20}) == "s0 < 16"
    assert not traced.specialised({"s0": 20})
    assert traced.specialised({"s0": 7})  # an equality: the trace was for even sizes
    with pytest.raises(SizeOutsideTrace, match="Mod"):
        traced.at({"s0": 7})
