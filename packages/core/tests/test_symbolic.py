"""Symbolic sizes in core (decision 0200): symbols in TensorMeta, meta inference on fake
tensors, guards recorded by the ShapeEnv, printing, and concretizing a graph."""

from __future__ import annotations

import collections

import torch

from torchstrata.core import (
    GraphBuilder,
    Level,
    SymbolicSizes,
    TensorMeta,
    concretize,
    concretize_graph,
    graph_has_symbols,
    has_symbols,
    input_meta,
    input_symbol_slots,
    interpret,
    specialise_sizes,
    symbolic_scope,
    torch_op,
)


def _symbolic_x(rows: int = 16, cols: int = 8) -> tuple[SymbolicSizes, TensorMeta]:
    sizes = SymbolicSizes({"L['x']": [0]})
    with symbolic_scope(sizes):
        meta = input_meta("L['x']", torch.randn(rows, cols))
    return sizes, meta


def test_input_meta_gives_the_marked_dim_a_symbol():
    sizes, meta = _symbolic_x()
    assert has_symbols(meta.shape)
    assert meta.shape[1] == 8 and isinstance(meta.shape[1], int)
    assert meta.strides[1] == 1 and str(meta.strides[0]) == "8"
    (binding,) = sizes.bindings
    assert (binding.source, binding.dim) == ("L['x']", 0)
    assert str(meta.shape[0]) == binding.name


def test_without_a_scope_or_for_sizes_0_and_1_nothing_is_symbolic():
    assert not has_symbols(input_meta("L['x']", torch.randn(16, 8)).shape)
    sizes = SymbolicSizes({"L['x']": [0]})
    with symbolic_scope(sizes):
        assert input_meta("L['x']", torch.randn(1, 8)).shape == (1, 8)
        assert input_meta("L['y']", torch.randn(16, 8)).shape == (16, 8)
    assert not sizes.bindings


def test_a_graph_with_symbols_prints_infers_and_concretizes():
    sizes, meta = _symbolic_x()
    builder = GraphBuilder(Level.TORCH)
    with symbolic_scope(sizes):
        x = builder.input("x", meta)
        half = meta.shape[0] // 2
        y = builder.call(torch_op(torch.narrow), x, 0, 0, half)
        z = builder.call(torch_op(torch.sigmoid), y)
        graph = builder.build([z])
    symbol = sizes.bindings[0].name
    assert f"f32[({symbol}//2), 8]" in str(graph)
    assert graph_has_symbols(graph)
    assert input_symbol_slots(graph) == {symbol: (0, 0)}
    for rows in (2, 5, 33):
        static = concretize_graph(graph, {symbol: rows})
        assert not graph_has_symbols(static)
        x_value = torch.randn(rows, 8)
        (out,) = interpret(static, x_value)
        torch.testing.assert_close(out, torch.sigmoid(x_value[: rows // 2]))


def test_a_graph_made_static_is_the_builder_copy_at_every_size():
    """``concretize_graph`` builds the nodes directly (decision 0320): the same graph as
    the node-by-node builder copy, symbolic arguments (and constant ones) evaluated,
    tags as the copy leaves them, and a meta shared by two nodes made static once."""
    from torchstrata.core.symbolic_graphs import _Concretized

    sizes, meta = _symbolic_x()
    builder = GraphBuilder(Level.TORCH)
    with symbolic_scope(sizes):
        x = builder.input("x", meta)
        half = meta.shape[0] // 2
        with builder.tagged({"recompute"}):
            y = builder.call(torch_op(torch.narrow), x, 0, 0, half)
        z = builder.call(torch_op(torch.sigmoid), y)
        w = builder.call(torch_op(torch.reshape), z, (half * 8,))
        v = builder.call(torch_op(torch.cos), y, meta=z.meta)
        graph = builder.build([w, v, y])
    symbol = sizes.bindings[0].name
    for rows in (2, 5, 33, 5):
        fast = concretize_graph(graph, {symbol: rows})
        slow = _Concretized(graph, {symbol: rows}).run()
        assert str(fast) == str(slow) and not graph_has_symbols(fast)
        assert [node.tags for node in fast.nodes] == [node.tags for node in slow.nodes]
        assert [type(arg) for arg in fast.nodes[0].args[1:]] == [int] * 3
        assert fast.nodes[2].args[1] == ((rows // 2) * 8,)
        assert fast.nodes[3].meta is fast.nodes[1].meta  # one meta, made static once
        x_value = torch.randn(rows, 8)
        out = interpret(fast, x_value)
        torch.testing.assert_close(out[0], torch.sigmoid(x_value[: rows // 2]).reshape(-1))


def test_a_decision_on_a_size_is_a_guard():
    sizes, meta = _symbolic_x()
    assert bool(meta.shape[0] > 10)
    assert sizes.describe_guards() == ("L['x'].size()[0] > 10",)
    assert concretize((meta.shape[0] * 3, 4), {sizes.bindings[0].name: 7}) == (21, 4)


def test_specialising_a_value_makes_its_sizes_plain_and_guards_them():
    sizes, meta = _symbolic_x(rows=16)
    rows = meta.shape[0]
    point = collections.namedtuple("point", "rows cols")
    value = [rows, rows * 2, {"n": rows}, slice(0, rows), torch.Size([rows, 8]), point(rows, 8)]
    plain = specialise_sizes(value)
    assert plain == [16, 32, {"n": 16}, slice(0, 16), torch.Size([16, 8]), point(16, 8)]
    assert type(plain[4]) is torch.Size and type(plain[5]) is point
    assert not has_symbols(plain)
    assert sizes.describe_guards() == ("Eq(L['x'].size()[0], 16)",)


def test_specialising_a_tensor_guards_its_sizes_and_returns_it():
    sizes, meta = _symbolic_x(rows=16)
    with symbolic_scope(sizes), sizes.fake_mode:
        fake = torch.empty(meta.shape)
    assert not sizes.describe_guards()
    pair = torch.return_types.max((fake, fake))
    assert specialise_sizes(pair) is pair  # no item changed: the same tuple
    assert sizes.describe_guards() == ("Eq(L['x'].size()[0], 16)",)


def test_a_static_graph_is_printed_once_and_a_symbolic_one_every_time():
    """Decision 0320: a graph without symbols keeps its text (graphs are immutable); a
    symbolic graph's text reads its ShapeEnv, which may learn a size later."""
    sizes, meta = _symbolic_x()
    builder = GraphBuilder(Level.TORCH)
    with symbolic_scope(sizes):
        x = builder.input("x", meta)
        graph = builder.build([builder.call(torch_op(torch.sigmoid), x)])
    symbol = sizes.bindings[0].name
    static = concretize_graph(graph, {symbol: 16})
    assert str(static) is str(static) and "f32[16, 8]" in str(static)
    before = str(graph)
    assert f"f32[{symbol}, 8]" in before
    with symbolic_scope(sizes):
        assert meta.shape[0] == 16  # a condition: the ShapeEnv replaces the symbol by 16
    after = str(graph)
    assert after != before and "f32[16, 8]" in after
