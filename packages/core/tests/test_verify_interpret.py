"""Verifier rules, the reference interpreter and the transformer."""

import pytest
import torch

from torchstrata.core import (
    Graph,
    GraphBuilder,
    Level,
    Node,
    TensorMeta,
    Transformer,
    VerificationError,
    aten,
    eliminate_dead_code,
    interpret,
    parse,
    prim,
    random_inputs,
    verify,
)

F32 = torch.float32


def _softmax_prims() -> Graph:
    return parse("""
graph prims {
  %x: f32[4, 6] = input
  %m: f32[4] = prims.amax(%x, [1])
  %mb: f32[4, 6]{1, 0} = prims.broadcast_in_dim(%m, [4, 6], [0])
  %d: f32[4, 6] = prims.sub(%x, %mb)
  %e: f32[4, 6] = prims.exp(%d)
  %s: f32[4] = prims.sum(%e, [1])
  %sb: f32[4, 6]{1, 0} = prims.broadcast_in_dim(%s, [4, 6], [0])
  %y: f32[4, 6] = prims.div(%e, %sb)
  return %y
}""")


def test_interpret_prims_softmax_matches_torch():
    graph = _softmax_prims()
    verify(graph)
    (x,) = random_inputs(graph)
    (y,) = interpret(graph, x)
    torch.testing.assert_close(y, torch.softmax(x, -1))


def test_verify_rejects_wrong_metadata_and_level():
    bad_meta = parse(
        "graph prims {\n  %x: f32[3] = input\n  %y: f64[3] = prims.exp(%x)\n  return %y\n}"
    )
    with pytest.raises(VerificationError, match="differs from the inferred"):
        verify(bad_meta)
    wrong_level = parse(
        "graph aten {\n  %x: f32[3] = input\n  %y: f32[3] = prims.exp(%x)\n  return %y\n}"
    )
    with pytest.raises(VerificationError, match=r"prims op prims\.exp in a aten graph"):
        verify(wrong_level)
    unknown = parse(
        "graph aten {\n  %x: f32[3] = input\n  %y: f32[3] = aten.nope.default(%x)\n  return %y\n}"
    )
    with pytest.raises(VerificationError, match="no ATen overload"):
        verify(unknown)


def test_verify_rejects_use_before_definition_and_foreign_outputs():
    x = Node("x", None, meta=TensorMeta((3,), F32))
    y = Node("y", prim("exp"), (x,), {}, TensorMeta((3,), F32))
    graph = Graph(Level.PRIMS, (), (y,), (y,))
    with pytest.raises(VerificationError, match="before it is defined"):
        verify(graph)
    stray = Node("z", None, meta=TensorMeta((3,), F32))
    with pytest.raises(VerificationError, match="not a node of this graph"):
        verify(Graph(Level.PRIMS, (x,), (), (stray,)))


def test_aten_meta_inference_keeps_device_and_multi_outputs():
    b = GraphBuilder(Level.ATEN)
    x = b.input("x", TensorMeta((4, 5), F32))
    pair = b.call(aten("var_mean.correction"), x, [1], correction=1, keepdim=True)
    var = b.getitem(pair, 0)
    graph = b.build([var])
    verify(graph)
    assert var.tensor_meta.shape == (4, 1)
    (x_value,) = random_inputs(graph)
    torch.testing.assert_close(interpret(graph, x_value)[0], x_value.var(1, keepdim=True))


def test_transformer_rewrites_and_dce_drops_dead_nodes():
    class ExpViaExp2(Transformer):
        def transform_node(self, node, args, kwargs):
            if node.op == prim("exp"):
                scaled = self.builder.call(prim("mul"), args[0], 1.4426950408889634)
                return self.builder.call(prim("exp2"), scaled)
            return super().transform_node(node, args, kwargs)

    graph = _softmax_prims()
    rewritten = ExpViaExp2(graph).run()
    verify(rewritten)
    assert "prims.exp2" in str(rewritten) and "prims.exp(" not in str(rewritten)
    (x,) = random_inputs(graph)
    torch.testing.assert_close(interpret(rewritten, x)[0], interpret(graph, x)[0])
    b = GraphBuilder(Level.PRIMS)
    x_node = b.input("x", TensorMeta((3,), F32))
    b.call(prim("exp"), x_node)
    kept = b.call(prim("neg"), x_node)
    assert [n.name for n in eliminate_dead_code(b.build([kept])).nodes] == ["neg"]


def test_random_inputs_respect_strides_and_dtypes():
    graph = parse(
        "graph prims {\n  %x: f16[3, 4]{1, 3} = input\n  %i: i64[0] = input\n  return %x\n}"
    )
    x, i = random_inputs(graph)
    assert x.stride() == (1, 3) and x.dtype == torch.float16
    assert i.shape == (0,) and i.dtype == torch.int64


CHANNELS_LAST = (200, 1, 40, 8)  # [2, 8, 5, 5]


def test_relayout_gives_an_elementwise_result_another_dense_layout():
    """Elementwise results may be stored in any dense layout (the decomposition gives them
    eager's); the verifier accepts it, views derive from it, and gaps are rejected."""
    from torchstrata.core import is_dense, same_layout

    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((2, 8, 5, 5), F32, strides=CHANNELS_LAST))
    y = b.relayout(b.call(prim("exp"), x), CHANNELS_LAST)
    assert y.tensor_meta.strides == CHANNELS_LAST
    view = b.call(prim("permute"), y, [0, 2, 3, 1])
    assert view.tensor_meta.strides == (200, 40, 8, 1)
    verify(b.build([view]))
    with pytest.raises(ValueError, match="already read"):
        b.relayout(y, (200, 25, 5, 1))
    assert is_dense((2, 8, 5, 5), CHANNELS_LAST) and is_dense((4, 1), (1, 7))
    assert not is_dense((2, 8, 5, 5), (400, 1, 80, 16))  # gaps
    assert same_layout((4, 1), (1, 1), (1, 0)) and not same_layout((2, 3), (3, 1), (1, 2))

    gapped = GraphBuilder(Level.PRIMS)
    x = gapped.input("x", TensorMeta((4, 6), F32))
    z = gapped.relayout(gapped.call(prim("exp"), x), (12, 2))
    with pytest.raises(VerificationError, match="differs from the inferred"):
        verify(gapped.build([z]))
