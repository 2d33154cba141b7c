"""The driver, the extern policy, stats, options, rule tables and the plugin API."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchstrata.core import (
    GETITEM,
    CompileOptions,
    GraphBuilder,
    GraphContract,
    Level,
    OpKind,
    TensorMeta,
    aten,
    create_plugin_manager,
    hookimpl,
    interpret,
    prim,
    random_inputs,
    verify,
)
from torchstrata.decomp import (
    DEFAULT_RULES,
    DuplicateRuleError,
    RuleTable,
    collect_rules,
    decompose,
    decompose_with_stats,
    override,
)
from torchstrata.decomp import plugin as decomp_plugin


def demo_graph():
    builder = GraphBuilder(Level.ATEN)
    x = builder.input("x", TensorMeta((64, 128), torch.float32))
    b = builder.input("b", TensorMeta((128,), torch.float32))
    added = builder.call(aten("add.Tensor"), x, b)
    gelu = builder.call(aten("gelu.default"), added)
    return builder.build([builder.call(aten("_softmax.default"), gelu, -1, False)])


def mlp_graph():
    builder = GraphBuilder(Level.ATEN)
    x = builder.input("x", TensorMeta((8, 16), torch.float32))
    w = builder.input("w", TensorMeta((32, 16), torch.float32))
    bias = builder.input("bias", TensorMeta((32,), torch.float32))
    hidden = builder.call(aten("addmm.default"), bias, x, builder.call(aten("t.default"), w))
    act = builder.call(aten("gelu.default"), hidden)
    out = builder.call(aten("mm.default"), act, builder.call(aten("permute.default"), w, [0, 1]))
    return builder.build([builder.call(aten("_softmax.default"), out, -1, False)])


def test_demo_becomes_pure_prims_and_matches_eager() -> None:
    prims, stats = decompose_with_stats(demo_graph())
    verify(prims)
    assert all(op.kind is OpKind.PRIMS for op in prims.ops())
    assert prim("erf") in prims.ops() and prim("amax") in prims.ops()
    assert sum(stats.decomposed.values()) == 3 and not stats.extern
    x, b = random_inputs(prims)
    expected = torch.softmax(F.gelu(x + b), -1)
    torch.testing.assert_close(interpret(prims, x, b)[0], expected)


def test_matmuls_stay_extern_and_are_counted() -> None:
    graph = mlp_graph()
    prims, stats = decompose_with_stats(graph)
    verify(prims)
    assert stats.extern == {"aten.addmm.default": 1, "aten.mm.default": 1}
    assert not stats.missing()
    assert [op.name for op in prims.ops() if op.kind is OpKind.ATEN] == [
        "aten.addmm.default",
        "aten.mm.default",
    ]
    inputs = random_inputs(graph)
    torch.testing.assert_close(interpret(prims, *inputs)[0], interpret(graph, *inputs)[0])


def test_op_without_rule_stays_extern_with_its_metadata() -> None:
    builder = GraphBuilder(Level.ATEN)
    x = builder.input("x", TensorMeta((4, 5), torch.float32, strides=(1, 4)))
    cumsum = builder.call(aten("cumprod.default"), builder.call(aten("exp.default"), x), 1)
    graph = builder.build([cumsum])
    prims, stats = decompose_with_stats(graph)
    verify(prims)
    assert stats.missing() == {"aten.cumprod.default": 1}
    assert prims.outputs[0].meta == cumsum.meta
    inputs = random_inputs(graph)
    torch.testing.assert_close(interpret(prims, *inputs)[0], interpret(graph, *inputs)[0])


def test_keep_extern_option_and_explicit_rules() -> None:
    options = CompileOptions(stage_options={"decomp": {"keep_extern": ["aten.gelu.default"]}})
    _, stats = decompose_with_stats(demo_graph(), options)
    assert stats.extern == {"aten.gelu.default": 1}
    only_add = RuleTable({"add.Tensor": DEFAULT_RULES["aten.add.Tensor"]})
    _, stats = decompose_with_stats(demo_graph(), rules=only_add)
    assert set(stats.extern) == {"aten.gelu.default", "aten._softmax.default"}


def test_prims_graph_passes_through_and_torch_graph_is_refused() -> None:
    prims = decompose(demo_graph())
    assert decompose(prims) is prims
    with pytest.raises(ValueError, match="aten graph"):
        decompose(GraphBuilder(Level.TORCH).build([]))


def _relu_as_clamp(ctx, x):
    return ctx.prim("maximum", x, 0.0)


def test_rule_tables_compose_and_refuse_duplicates() -> None:
    mine = RuleTable({"aten.relu.default": _relu_as_clamp}, source="mine")
    with pytest.raises(DuplicateRuleError, match="mine"):
        DEFAULT_RULES + mine
    merged = DEFAULT_RULES + {"relu": override(_relu_as_clamp)}
    assert merged["aten.relu.default"].fn is _relu_as_clamp
    assert len(merged) == len(DEFAULT_RULES)
    with pytest.raises(DuplicateRuleError):
        merged + {"relu": override(_relu_as_clamp)}


class HardshrinkPlugin:
    """A third-party plugin adding a rule for an op decomp does not cover."""

    @hookimpl
    def torchstrata_decompositions(self):
        def hardshrink(ctx, x, lambd=0.5):
            keep = ctx.prim("gt", ctx.prim("abs", x), lambd)
            return ctx.where(keep, x, 0.0)

        return {"aten.hardshrink.default": hardshrink}


def _manager(*plugins, addhooks: bool = True):
    manager = create_plugin_manager(
        load_entrypoints=False, plugins=[("decomp", decomp_plugin), *plugins]
    )
    if addhooks:
        manager.hook.torchstrata_addhooks.call_historic(kwargs={"pluginmanager": manager})
    return manager


def test_plugin_rules_reach_the_decompose_hook() -> None:
    assert "aten.hardshrink.default" not in DEFAULT_RULES
    manager = _manager(("hardshrink", HardshrinkPlugin()))
    assert "aten.hardshrink.default" in collect_rules(manager)
    builder = GraphBuilder(Level.ATEN)
    x = builder.input("x", TensorMeta((3, 4), torch.float32))
    graph = builder.build([builder.call(aten("hardshrink.default"), x)])
    prims = manager.hook.torchstrata_decompose(
        graph=graph, options=CompileOptions(), contract=GraphContract()
    )
    verify(prims)
    assert all(op.kind is OpKind.PRIMS for op in prims.ops())
    inputs = random_inputs(graph)
    torch.testing.assert_close(interpret(prims, *inputs)[0], interpret(graph, *inputs)[0])


def test_conflicting_plugins_are_an_error_and_override_wins() -> None:
    class Conflict:
        @hookimpl
        def torchstrata_decompositions(self):
            return {"aten.relu.default": _relu_as_clamp}

    with pytest.raises(DuplicateRuleError, match="decomp and conflict"):
        collect_rules(_manager(("conflict", Conflict())))

    class Override:
        @hookimpl
        def torchstrata_decompositions(self):
            return {"aten.relu.default": override(_relu_as_clamp)}

    assert collect_rules(_manager(("o", Override())))["aten.relu.default"].fn is _relu_as_clamp


def test_decompose_hook_works_without_addhooks() -> None:
    manager = _manager(addhooks=False)
    prims = manager.hook.torchstrata_decompose(
        graph=demo_graph(), options=CompileOptions(), contract=GraphContract()
    )
    assert all(op.kind is OpKind.PRIMS for op in prims.ops())


def test_results_take_their_aten_nodes_layout():
    """An elementwise result is stored as eager lays its ATen node out (channels-last
    here); ``contiguous()`` of it becomes a row-major copy; a returned value and its
    clone stay two values."""
    channels_last = (200, 1, 40, 8)
    builder = GraphBuilder(Level.ATEN)
    x = builder.input("x", TensorMeta((2, 8, 5, 5), torch.float32, strides=channels_last))
    y = builder.call(aten("relu.default"), x)
    z = builder.call(aten("clone.default"), y, memory_format=torch.contiguous_format)
    w = builder.call(aten("clone.default"), y)
    assert y.tensor_meta.strides == channels_last  # the ATen metas are eager's
    prims = decompose(builder.build([y, z, w]))
    verify(prims)
    relu, contiguous, clone = prims.outputs
    assert relu.tensor_meta.strides == channels_last
    assert contiguous.tensor_meta.strides == (200, 25, 5, 1)
    assert len({relu, contiguous, clone}) == 3
    assert clone.tensor_meta.strides == channels_last
    (x_value,) = random_inputs(prims)
    for got in interpret(prims, x_value):
        torch.testing.assert_close(got, torch.relu(x_value))


def test_extern_ops_keep_the_layout_eager_traced():
    """A channels-last convolution stays channels-last in the prims graph: the ATen
    graph's metadata was traced on the inputs' device, where meta tensors would say
    row-major (and the launcher would copy every result into that layout)."""
    channels_last = (1024, 1, 128, 16)
    builder = GraphBuilder(Level.ATEN)
    x = builder.input("x", TensorMeta((2, 16, 8, 8), torch.float32, strides=channels_last))
    w = builder.input("w", TensorMeta((16, 16, 3, 3), torch.float32, strides=(144, 1, 48, 16)))
    traced = TensorMeta((2, 16, 8, 8), torch.float32, strides=channels_last)
    args = (None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    conv = builder.call(aten("convolution.default"), x, w, *args, meta=traced)
    relu = builder.call(aten("relu.default"), conv)
    prims = decompose(builder.build([relu]))
    (extern,) = [node for node in prims.nodes if node.op.kind is OpKind.ATEN]
    assert extern.tensor_meta.strides == channels_last
    assert prims.outputs[0].tensor_meta.strides == channels_last


def test_extern_ops_keep_inferred_shapes_where_the_trace_disagrees():
    """``_embedding_bag_forward_only``'s CPU kernel returns an empty ``offset2bag`` where
    its meta kernel says 5 elements; the prims graph keeps the meta answer (the one
    ``verify`` checks) and takes only strides from the trace."""
    builder = GraphBuilder(Level.ATEN)
    weight = builder.input("weight", TensorMeta((10, 5), torch.float32))
    indices = builder.input("indices", TensorMeta((5,), torch.int64))
    offsets = builder.input("offsets", TensorMeta((2,), torch.int64))
    traced = (
        TensorMeta((2, 5), torch.float32),
        TensorMeta((0,), torch.int64),
        TensorMeta((2,), torch.int64),
        TensorMeta((2,), torch.int64),
    )
    bag = builder.call(
        aten("_embedding_bag_forward_only.default"), weight, indices, offsets, meta=traced
    )
    out = builder.call(GETITEM, bag, 0)
    prims = decompose(builder.build([out]))
    verify(prims)
    (extern,) = [node for node in prims.nodes if node.op.kind is OpKind.ATEN]
    assert extern.meta[1].shape == (5,)


def _user_outputs(count: int) -> GraphContract:
    return GraphContract(user_outputs=count)


def test_a_user_output_viewing_an_intermediate_takes_eagers_layout():
    """``squeeze`` of a relaid intermediate lowers to ``prims.reshape``, which is laid out
    row-major; returned to the user it is copied into eager's layout (the view's strides
    in the ATen graph). Outputs the user does not get (saved for backward) stay views."""
    builder = GraphBuilder(Level.ATEN)
    x = builder.input("x", TensorMeta((6, 1, 4), torch.float32, strides=(1, 24, 6)))
    relu = builder.call(aten("relu.default"), x)
    squeeze = builder.call(aten("squeeze.dim"), relu, 1)
    assert squeeze.tensor_meta.strides == (1, 6)
    graph = builder.build([squeeze])
    prims = decompose(graph, contract=_user_outputs(1))
    verify(prims)
    assert prims.outputs[0].tensor_meta.strides == (1, 6)
    assert prims.outputs[0].op == prim("mul")
    unchanged = decompose(graph)
    assert unchanged.outputs[0].op == prim("reshape")
    inputs = random_inputs(graph)
    torch.testing.assert_close(interpret(prims, *inputs)[0], interpret(graph, *inputs)[0])


def test_a_user_output_that_eager_makes_fresh_is_never_an_input():
    """``roll`` by 0 lowers to its input; eager returns a new tensor, so the user's output
    is a copy (an update of it must not show in the input). A view of an input stays
    one: eager returns a view too, and the runtime rebuilds it from the input."""
    builder = GraphBuilder(Level.ATEN)
    x = builder.input("x", TensorMeta((4, 6), torch.float32, strides=(1, 4)))
    roll = builder.call(aten("roll.default"), x, [0], [0])
    view = builder.call(aten("unsqueeze.default"), x, 0)
    graph = builder.build([roll, view])
    prims = decompose(graph, contract=_user_outputs(2))
    verify(prims)
    copy, unsqueezed = prims.outputs
    assert copy.op == prim("mul") and copy.args[0] is prims.inputs[0]
    assert copy.tensor_meta.strides == roll.tensor_meta.strides
    assert unsqueezed.op == prim("broadcast_in_dim")
    plain = decompose(graph)  # no user outputs named: the graph's values as they are
    assert plain.outputs[0] is plain.inputs[0]


def test_copies_of_bool_outputs_are_generated_ops():
    """A bool output's copy is ``bitwise_or(x, False)``: the code generators make no bool
    arithmetic, and an ATen ``mul`` would choose its own layout."""
    builder = GraphBuilder(Level.ATEN)
    x = builder.input("x", TensorMeta((4, 6), torch.bool, strides=(1, 4)))
    graph = builder.build([builder.call(aten("roll.default"), x, [0], [0])])
    prims = decompose(graph, contract=_user_outputs(1))
    verify(prims)
    (copy,) = prims.outputs
    assert copy.op == prim("bitwise_or") and copy.tensor_meta.dtype is torch.bool
    inputs = random_inputs(graph)
    assert torch.equal(interpret(prims, *inputs)[0], inputs[0])


def test_the_prims_graph_is_built_for_the_contracts_input_layouts():
    """A backward's saved value comes as the lowered forward returns it (here column-major
    where the trace had it row-major): the prims graph takes it so, and what depends on it
    follows."""
    builder = GraphBuilder(Level.ATEN)
    saved = builder.input("saved", TensorMeta((2, 3), torch.float32))
    graph = builder.build([builder.call(aten("relu.default"), saved)])
    layout = TensorMeta((2, 3), torch.float32, strides=(1, 2))
    contract = GraphContract(input_layouts=(layout,))
    prims = decompose(graph, contract=contract)
    assert prims.inputs[0].meta == layout
    assert contract.follows_layouts(prims)
    x = torch.randn(3, 2).t()
    torch.testing.assert_close(interpret(prims, x)[0], torch.relu(x))
