"""A negative int made symbolic (its magnitude's carrier planned, decision 0385), and
ints computed from symbolic ints handed back to Python (decision 0386)."""

from __future__ import annotations

import torch

from torchstrata.capture import capture
from torchstrata.capture.int_expressions import int_expression
from torchstrata.core import (
    SymbolicSizes,
    graph_has_symbols,
    int_negative_source,
    int_size_source,
    symbolic_scope,
)


def tail(x, n):
    return x[:, -n:]


def advance(x, cfg):
    cfg["pos"] += 1
    return x[: cfg["pos"]]


def test_a_negative_int_is_minus_its_carriers_symbol():
    sizes = SymbolicSizes({int_negative_source("L['n']"): [0]})
    with symbolic_scope(sizes):
        result = capture(tail, (torch.randn(4, 20), -3), {})
    (graph,) = result.graphs
    assert graph_has_symbols(graph)
    # -n is the symbol itself: the slice starts at it, not at a constant 3
    assert "slice.Tensor(%x, 1, s" in str(graph)
    assert "(-L['n']) <= 20" in sizes.describe_guards()
    assert any("int_negative" in guard.source for guard in result.guards)
    assert not any(guard.source == "L['n']" and guard.expected == -3 for guard in result.guards)


def test_a_dict_item_advanced_from_a_symbolic_int_is_rebuilt_from_its_source():
    sizes = SymbolicSizes({int_size_source("L['cfg']['pos']"): [0]})
    with symbolic_scope(sizes):
        result = capture(advance, (torch.randn(20), {"pos": 4}), {})
    (graph,) = result.graphs
    assert graph_has_symbols(graph)  # not specialised by the store
    # the program writes the call's pos + 1 back
    cfg = {"pos": 9}
    out = result.program([lambda *inputs: (inputs[0][:10],)], (torch.randn(20), cfg), {})
    assert cfg == {"pos": 10} and out.shape == (10,)


def test_int_expressions_are_python_over_the_symbols_sources():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    s = env.create_unbacked_symint()
    name = s.node.expr.name
    symbols = {name: "(L['n'])"}
    assert eval(int_expression(s * 2 + 1, symbols), {"L": {"n": 5}}) == 11
    assert eval(int_expression(s // 3, symbols), {"L": {"n": 7}}) == 2
    assert int_expression(s + 1, {}) is None  # a symbol of no int: specialised instead
    assert int_expression(5, symbols) is None
