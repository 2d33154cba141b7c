"""The text form prints readably and parses back to an equal graph."""

import pytest
import torch

from torchstrata.core import (
    RECOMPUTE,
    GraphBuilder,
    Level,
    OpKind,
    OpRef,
    ParseError,
    TensorMeta,
    Transformer,
    aten,
    parse,
    prim,
    torch_op,
    verify,
)

GOLDEN_PRIMS = """\
graph prims {
  %x: f32[4, 8] = input
  %b: bf16[8]{2} cuda:0 = input
  %bc: f32[4, 8]{0, 1} = prims.broadcast_in_dim(%x, [4, 8], [0, 1])
  %m: f32[4] = prims.amax(%bc, [1])
  %pair: (f32[4], i64[4]) = aten.max.dim(%x, 1)
  %v: f32[4] = builtin.getitem(%pair, 0)
  %c: f32[4, 8] = prims.full([4, 8], -inf, torch.float32, device('cpu'))
  %w: f32[4, 8] grad = prims.where(%bc, nan, 1e-05)
  return %m, %v
}"""


def test_golden_listing_round_trips_verbatim():
    graph = parse(GOLDEN_PRIMS)
    assert str(graph) == GOLDEN_PRIMS
    assert graph.node("b").tensor_meta == TensorMeta((8,), torch.bfloat16, "cuda:0", (2,))
    assert graph.node("w").tensor_meta.requires_grad
    assert graph.node("c").args[1] == float("-inf")


def _demo_graph():
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta((4, 8), torch.float32))
    bias = b.input("b", TensorMeta((8,), torch.float32))
    import operator

    add = b.call(torch_op(operator.add), x, bias)
    gelu = b.call(torch_op(torch.nn.functional.gelu), add, approximate="tanh")
    out = b.call(OpRef(OpKind.TORCH, "torch.Tensor.softmax"), gelu, -1, dtype=torch.float64)
    return b.build([out, add])


@pytest.mark.parametrize("level", [Level.TORCH, Level.ATEN, Level.PRIMS])
def test_built_graphs_round_trip(level):
    if level is Level.TORCH:
        graph = _demo_graph()
    else:
        b = GraphBuilder(level)
        x = b.input("x", TensorMeta((2, 3), torch.float16, strides=(1, 2)))
        y = b.call(
            aten("_softmax.default") if level is Level.ATEN else prim("exp"),
            x,
            *((-1, False) if level is Level.ATEN else ()),
        )
        graph = b.build([y, x])
    again = parse(str(graph))
    assert str(again) == str(graph)
    verify(again)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("graph prims {\n  return %x\n}", "unknown name|not a node|before it is defined"),
        ("graph nowhere {\n}", "unknown level"),
        ("graph prims {\n  %x: f99[3] = input\n  return %x\n}", "dtype"),
        (
            "graph prims {\n  %x: f32[3] = input\n  %x: f32[3] = prims.exp(%x)\n  return %x\n}",
            "twice",
        ),
        ("graph prims {\n  %y: f32[3] = prims.exp(%x)\n  return %y\n}", "before it is defined"),
        ("graph prims {\n  %x: f32[3] = input\n}", "no return"),
    ],
)
def test_parse_errors_name_the_problem(text, message):
    with pytest.raises(ParseError, match=message):
        parse(text)


def test_node_tags_print_parse_back_and_survive_a_transformer():
    b = GraphBuilder(Level.ATEN)
    x = b.input("x", TensorMeta((4,), torch.float32))
    with b.tagged({RECOMPUTE}):
        y = b.call(aten("sin"), x)
        with b.tagged({"other"}):
            z = b.call(aten("cos"), y)
    graph = b.build([b.call(aten("exp"), z)])
    text = str(graph)
    assert "aten.sin.default(%x) @recompute\n" in text
    assert "aten.cos.default(%sin) @other @recompute\n" in text
    assert "aten.exp.default(%cos)\n" in text
    parsed = parse(text)
    assert [node.tags for node in parsed.nodes] == [
        {RECOMPUTE},
        {RECOMPUTE, "other"},
        frozenset(),
    ]
    assert str(parsed) == text
    assert str(Transformer(graph).run()) == text
