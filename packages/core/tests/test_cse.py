"""Common-subexpression elimination: which nodes merge and which must not."""

import torch

from torchstrata.core import (
    GraphBuilder,
    Level,
    TensorMeta,
    aten,
    eliminate_common_subexpressions,
    interpret,
    prim,
    random_inputs,
    verify,
)

F32 = torch.float32


def test_repeated_values_merge_and_their_users_follow():
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 6), F32))
    first = b.call(prim("sum"), b.call(prim("exp"), x), [1])
    second = b.call(prim("sum"), b.call(prim("exp"), x), [1])  # the same, node for node
    out = b.call(prim("div"), first, second)
    graph = b.build([out])
    merged = eliminate_common_subexpressions(graph)
    verify(merged)
    ops = [str(node.op) for node in merged.nodes]
    assert ops.count("prims.exp") == 1 and ops.count("prims.sum") == 1
    (value,) = random_inputs(graph)
    torch.testing.assert_close(interpret(merged, value)[0], interpret(graph, value)[0])


def test_constants_that_compare_equal_but_differ_are_kept_apart():
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((3,), F32))
    plus = b.call(prim("mul"), x, 0.0)
    minus = b.call(prim("mul"), x, -0.0)  # 0.0 == -0.0, but the signs of the zeros differ
    one = b.call(prim("mul"), x, 1)
    one_float = b.call(prim("mul"), x, 1.0)  # 1 == 1.0: an int and a float operand
    graph = b.build([b.call(prim("add"), plus, minus), b.call(prim("add"), one, one_float)])
    assert eliminate_common_subexpressions(graph) is graph


def test_nan_constants_merge_though_nan_is_not_equal_to_itself():
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((3,), F32))
    nan_a = b.call(prim("add"), x, float("nan"))
    nan_b = b.call(prim("add"), x, float("nan"))
    merged = eliminate_common_subexpressions(b.build([b.call(prim("add"), nan_a, nan_b)]))
    assert [str(node.op) for node in merged.nodes].count("prims.add") == 2


def test_two_outputs_keep_their_own_nodes():
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((3,), F32))
    one, two = b.call(prim("neg"), x), b.call(prim("neg"), x)
    inner = b.call(prim("neg"), x)  # not an output: merges into an output's node
    graph = b.build([one, two, b.call(prim("exp"), inner)])
    merged = eliminate_common_subexpressions(graph)
    assert merged.outputs[0] is not merged.outputs[1]
    assert [str(node.op) for node in merged.nodes].count("prims.neg") == 2
    assert merged.outputs[2].args[0] is merged.outputs[0]


def test_aten_ops_are_never_merged():
    # an ATen op left in a prims graph may draw random numbers: two calls, two draws
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((3,), F32))
    first, second = b.call(aten("rand_like"), x), b.call(aten("rand_like"), x)
    graph = b.build([b.call(prim("sub"), first, second)])
    assert eliminate_common_subexpressions(graph) is graph


def test_a_merged_graph_comes_back_as_it_is_and_merges_nothing_more():
    """The merge is idempotent (decision 0320): its result, merged again, is the same
    graph object, and merging it from scratch would find nothing either."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 6), F32))
    first = b.call(prim("exp"), x)
    second = b.call(prim("exp"), x)
    both = b.call(prim("add"), b.call(prim("neg"), first), b.call(prim("neg"), second))
    graph = b.build([both, first])
    merged = eliminate_common_subexpressions(graph)
    assert [str(node.op) for node in merged.nodes].count("prims.neg") == 1
    assert eliminate_common_subexpressions(merged) is merged
    rebuilt = GraphBuilder(Level.PRIMS)
    copies: dict = {}
    for node in merged.inputs:
        copies[node] = rebuilt.input(node.name, node.meta)
    for node in merged.nodes:
        args = [copies.get(arg, arg) for arg in node.args]
        copies[node] = rebuilt.call(node.op, *args, meta=node.meta, name=node.name)
    fresh = rebuilt.build([copies[node] for node in merged.outputs])
    assert eliminate_common_subexpressions(fresh) is fresh  # nothing left to merge
    assert str(fresh) == str(merged)


def test_a_nodes_inputs_are_found_once_and_handed_out_as_new_lists():
    """``Node.input_nodes`` keeps what it found (decision 0320): the same nodes every
    time, a list the caller may change, and a node made by ``attrs.evolve`` finds its own."""
    import attrs

    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4,), F32))
    y = b.input("y", TensorMeta((4,), F32))
    add = b.call(prim("add"), x, y)
    first = add.input_nodes()
    first.append(add)
    assert add.input_nodes() == [x, y]
    assert attrs.evolve(add, args=(y, y)).input_nodes() == [y, y]
