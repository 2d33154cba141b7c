"""Nodes tagged ``recompute`` (a checkpointed region): the partition recomputes them in
the backward instead of saving them; the gradients stay eager's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchstrata.autograd import aot, partition, trace_graph
from torchstrata.core import (
    RECOMPUTE,
    GraphBuilder,
    Level,
    TensorMeta,
    interpret,
    recompute_region,
    torch_op,
)


def _mlp_graph(checkpointed: bool, dropout: bool = False):
    """``x + mlp(tanh(x))`` with ``mlp = w2 @ dropout?(gelu(w1 @ h))``, bias-free; with
    ``checkpointed`` the MLP's nodes are tagged as capture tags a checkpoint's."""
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta((4, 8), torch.float32, requires_grad=True))
    w1 = b.input("w1", TensorMeta((32, 8), torch.float32, requires_grad=True))
    w2 = b.input("w2", TensorMeta((8, 32), torch.float32, requires_grad=True))
    h = b.call(torch_op(torch.tanh), x)
    with b.tagged({RECOMPUTE} if checkpointed else set()):
        hidden = b.call(torch_op(F.gelu), b.call(torch_op(F.linear), h, w1))
        if dropout:
            hidden = b.call(torch_op(F.dropout), hidden, 0.5, True)
        y = b.call(torch_op(F.linear), hidden, w2)
    return b.build([b.call(torch_op(torch.add), x, y)])


def _inputs():
    generator = torch.Generator().manual_seed(0)
    shapes = [(4, 8), (32, 8), (8, 32)]
    return [torch.randn(*shape, generator=generator, requires_grad=True) for shape in shapes]


def test_the_forward_saves_fewer_tensors_and_no_checkpointed_value():
    plain = partition(trace_graph(_mlp_graph(False), training=True))
    trace = trace_graph(_mlp_graph(True), training=True)
    parts = partition(trace)
    assert trace.recompute  # the ATen nodes of the tagged torch nodes
    assert len(parts.saved) < len(plain.saved)
    assert not [node.name for node in parts.saved if node.name in trace.recompute]
    # only inputs: the region's input, tanh(x), is pointwise and recomputed from x too
    assert all(node.is_input for node in parts.saved)
    assert not all(node.is_input for node in plain.saved)
    # both matmuls of the region run again in the backward (plain: only the gradients')
    mms = [op.name for op in parts.backward.ops()].count("aten.mm.default")
    plain_mms = [op.name for op in plain.backward.ops()].count("aten.mm.default")
    assert mms == plain_mms + 1  # the first matmul; the second one's output is not needed


def test_gradients_equal_eager():
    result = aot(_mlp_graph(True))
    inputs = _inputs()
    x, w1, w2 = inputs
    expected_out = x + F.linear(F.gelu(F.linear(torch.tanh(x), w1)), w2)
    tangent = torch.randn_like(expected_out)
    expected = torch.autograd.grad(expected_out, inputs, tangent)
    with torch.no_grad():
        outputs = interpret(result.forward, *inputs)
        n = result.num_user_outputs
        grads = interpret(result.backward, *outputs[n:], tangent)
    torch.testing.assert_close(outputs[0], expected_out.detach())
    assert result.grad_inputs == (0, 1, 2)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("checkpointed", [False, True])
def test_a_random_draw_inside_the_region_is_saved_not_drawn_again(checkpointed):
    parts = partition(trace_graph(_mlp_graph(checkpointed, dropout=True), training=True))
    backward_ops = [op.name for op in parts.backward.ops()]
    assert not any("dropout" in name or "bernoulli" in name for name in backward_ops)
    if checkpointed:
        assert "aten.mm.default" in backward_ops


def _two_regions_graph():
    """``x + r2(r1(x))``, ``r(h) = gelu(h @ w.T)``, each ``r`` its own checkpoint."""
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta((4, 8), torch.float32, requires_grad=True))
    w1 = b.input("w1", TensorMeta((8, 8), torch.float32, requires_grad=True))
    w2 = b.input("w2", TensorMeta((8, 8), torch.float32, requires_grad=True))
    h = x
    for number, w in ((1, w1), (2, w2)):
        with b.tagged({RECOMPUTE, recompute_region(number)}):
            h = b.call(torch_op(F.gelu), b.call(torch_op(F.linear), h, w, name=f"linear{number}"))
    return b.build([b.call(torch_op(torch.add), x, h)])


def test_a_region_output_read_by_the_next_region_is_saved():
    """As eager's second checkpoint saves its input: the first region's output is saved
    (not recomputed from ``x``: that would rerun the first region before the backward of
    the second), its inside is not."""
    trace = trace_graph(_two_regions_graph(), training=True)
    parts = partition(trace)
    saved = [node for node in parts.saved if not node.is_input]
    assert len(saved) == 1 and saved[0].name in trace.region_outputs
    assert saved[0].op.name == "aten.gelu.default"
    assert not [node for node in parts.saved if node.name in trace.recompute]


def test_the_backward_recomputes_a_region_just_before_its_first_use():
    """The first region's matmul (``x @ w1.T``) is recomputed after the second region's
    gradient (joint order would put every recomputation first, holding all at once)."""
    backward = partition(trace_graph(_two_regions_graph(), training=True)).backward
    x = backward.inputs[0]
    ops = [node.op.name for node in backward.nodes]
    recomputed = [
        i
        for i, node in enumerate(backward.nodes)
        if node.op.name == "aten.mm.default" and node.args[0] is x
    ]
    assert len(recomputed) == 1, str(backward)
    assert recomputed[0] > ops.index("aten.gelu_backward.default"), str(backward)
