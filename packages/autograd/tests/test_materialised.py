"""Values the forward writes anyway (read by a matmul, or a residual sum that a norm and the
next sum read) are saved for the backward, never recomputed there (decision 0260)."""

from __future__ import annotations

import operator

import torch
import torch.nn.functional as F

from torchstrata.autograd import aot, partition, trace_graph
from torchstrata.core import CompileOptions, GraphBuilder, Level, TensorMeta, interpret, torch_op


def _call(b, fn, *args):
    return b.call(torch_op(fn), *args)


def _residual_stack(layers: int):
    """``h_k = h_(k-1) + gelu(layer_norm(h_(k-1)) @ w_k.T) @ v_k.T``, ``layers`` times."""
    b = GraphBuilder(Level.TORCH)
    h = b.input("x", TensorMeta((2, 4, 16), torch.float32, requires_grad=True))
    for k in range(layers):
        w = b.input(f"w{k}", TensorMeta((32, 16), torch.float32, requires_grad=True))
        v = b.input(f"v{k}", TensorMeta((16, 32), torch.float32, requires_grad=True))
        normed = _call(b, F.layer_norm, h, [16])
        branch = _call(b, F.linear, _call(b, F.gelu, _call(b, F.linear, normed, w)), v)
        h = _call(b, operator.add, h, branch)
    return b.build([_call(b, torch.sum, h)])


def _saved_ops(parts) -> list[str]:
    return [node.op.name for node in parts.saved if node.op is not None]


def _adds(graph) -> set[str]:
    return {n.name for n in graph.nodes if n.op is not None and n.op.name == "aten.add.Tensor"}


def test_the_gelu_a_matmul_reads_is_saved_and_not_recomputed():
    trace = trace_graph(_residual_stack(3), training=True)
    parts = partition(trace)
    assert _saved_ops(parts).count("aten.gelu.default") == 3
    assert "aten.gelu.default" not in [op.name for op in parts.backward.ops()]
    plain = partition(trace, save_materialised=False)
    assert "aten.gelu.default" not in _saved_ops(plain)
    assert [op.name for op in plain.backward.ops()].count("aten.gelu.default") == 3


def test_the_residual_stream_is_saved_not_rebuilt_from_the_branches():
    trace = trace_graph(_residual_stack(3), training=True)
    parts = partition(trace)
    # the sums that a norm and the next sum read (the last one only feeds the loss)
    assert _saved_ops(parts).count("aten.add.Tensor") == 2
    assert not _adds(parts.forward) & _adds(parts.backward)  # none recomputed
    plain = partition(trace, save_materialised=False)
    # without the rule: rebuilt from the saved branch outputs
    assert _adds(parts.forward) & _adds(plain.backward)


def test_gradients_equal_eager_with_and_without_the_rule():
    graph = _residual_stack(2)
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(*i.tensor_meta.shape, generator=generator) for i in graph.inputs]
    leaves = [t.clone().requires_grad_() for t in inputs]
    interpret(graph, *leaves)[0].backward()
    for blocked in (frozenset(), frozenset({"autograd.materialised_saved"})):
        result = aot(graph, CompileOptions(blocked_plugins=blocked))
        outputs = interpret(result.forward, *inputs)
        saved = outputs[result.num_user_outputs :]
        grads = interpret(result.backward, *saved, torch.ones(()))
        assert len(grads) == len(leaves)
        for grad, leaf in zip(grads, leaves, strict=True):
            torch.testing.assert_close(grad, leaf.grad)


def test_an_operand_of_a_checkpointed_matmul_is_left_to_the_cut():
    from torchstrata.core import RECOMPUTE

    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta((4, 8), torch.float32, requires_grad=True))
    w = b.input("w", TensorMeta((8, 8), torch.float32, requires_grad=True))
    h = _call(b, torch.tanh, x)
    with b.tagged({RECOMPUTE}):
        y = _call(b, F.linear, h, w)
    graph = b.build([_call(b, torch.sum, _call(b, torch.sin, y))])
    parts = partition(trace_graph(graph, training=True))
    assert all(node.is_input for node in parts.saved)  # tanh(x) recomputed from x
