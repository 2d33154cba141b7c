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


def test_rebinding_a_slice_write_keeps_its_bounds_symbolic():
    # ``cache[:, t : 2 * t] = k`` (Dynamo's ``operator.setitem``, no metadata of its own):
    # the slice's bounds move to the new ShapeEnv and the write is inferred on its fake
    # tensors, so nothing pins the size to its hint (was: Eq(2*s, 32), s -> 16)
    import operator

    sizes = SymbolicSizes({"L['k']": [1]})
    builder = GraphBuilder(Level.TORCH)
    with symbolic_scope(sizes):
        cache = builder.input("cache", input_meta("L['cache']", torch.randn(2, 80, 4)))
        k_meta = input_meta("L['k']", torch.randn(2, 16, 4))
        k = builder.input("k", k_meta)
        t = k_meta.shape[1]
        builder.call(torch_op(operator.setitem), cache, (slice(None), slice(t, 2 * t)), k)
        graph = builder.build([builder.call(torch_op(torch.Tensor.sum), cache, 1)])
    (symbol,) = (binding.name for binding in sizes.bindings)
    fresh = SymbolicSizes({})
    rebound = rebind_graph(graph, fresh)
    (write,) = [node for node in rebound.nodes if node.op == torch_op(operator.setitem)]
    bounds = write.args[1][1]
    assert all(bound.node.shape_env is fresh.shape_env for bound in (bounds.start, bounds.stop))
    assert symbol_hints(rebound) == {symbol: 16}
    assert not fresh.shape_env.replacements, fresh.shape_env.replacements
    static = concretize_graph(rebound, {symbol: 7})  # the bounds made static too
    (write,) = [node for node in static.nodes if node.op == torch_op(operator.setitem)]
    assert write.args[1] == (slice(None), slice(7, 14)) and write.args[2].meta.shape == (2, 7, 4)
