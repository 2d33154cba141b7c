"""Joint forward/backward tracing and partitioning, checked against eager autograd."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F

from torchstrata.autograd import aot, saved_activation_report
from torchstrata.core import (
    CompileOptions,
    GraphBuilder,
    Level,
    TensorMeta,
    from_fx,
    parse,
    torch_op,
    verify,
)

F64 = torch.float64


def _builder(**inputs):
    """Inputs as ``name=(shape, requires_grad)`` (f64) or ``name=(shape, grad, dtype)``."""
    b = GraphBuilder(Level.TORCH)
    nodes = []
    for name, spec in inputs.items():
        shape, grad, *dtype = spec
        nodes.append(
            b.input(name, TensorMeta(shape, dtype[0] if dtype else F64, requires_grad=grad))
        )
    return b, nodes


def _call(b, fn, *args, **kwargs):
    return b.call(torch_op(fn), *args, **kwargs)


def _randn(graph, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [
        torch.randn(m.shape, generator=generator, dtype=m.dtype)
        if m.dtype.is_floating_point
        else torch.zeros(m.shape, dtype=m.dtype)
        for m in graph.input_metas
    ]


def _mlp():
    b, (x, w1, b1, w2, b2) = _builder(
        x=((4, 16), False),
        w1=((32, 16), True),
        b1=((32,), True),
        w2=((8, 32), True),
        b2=((8,), True),
    )
    hidden = _call(b, F.gelu, _call(b, F.linear, x, w1, b1))
    return b.build([_call(b, F.linear, hidden, w2, b2)])


def _norm_block(kind: str):
    b, (x, w, bias, w1) = _builder(
        x=((2, 3, 16), True), w=((16,), True), bias=((16,), True), w1=((24, 16), True)
    )
    if kind == "layer_norm":
        normed = _call(b, F.layer_norm, x, [16], w, bias)
    else:
        normed = _call(b, operator.add, _call(b, F.rms_norm, x, [16], w), bias)
    out = _call(b, F.gelu, _call(b, F.linear, normed, w1))
    return b.build([_call(b, operator.add, out, 1.0)])


def test_mlp_gradients_match_eager(aot):
    graph = _mlp()
    result = aot.check_training(graph, _randn(graph))
    assert result.grad_inputs == (1, 2, 3, 4)
    assert result.tangent_outputs == (0,)
    # the joint graph recorded PyTorch's derivative formulas
    assert "aten.gelu_backward.default" in [op.name for op in result.backward.ops()]


def test_mlp_saves_the_gelu_that_its_second_matmul_reads():
    # the forward writes gelu's result for the matmul anyway, and the backward's weight
    # gradient reads it again: saved, not recomputed (decision 0260), as eager saves it
    graph = _mlp()
    result = aot(graph)
    saved = result.forward.outputs[result.num_user_outputs :]
    assert any(node.op is not None and node.op.name == "aten.gelu.default" for node in saved)
    assert "aten.gelu.default" not in [op.name for op in result.backward.ops()]
    report = saved_activation_report(graph, _randn(graph))
    assert report.compiled_bytes <= report.eager_bytes
    assert report.compiled_activation_bytes <= report.eager_activation_bytes
    options = CompileOptions(blocked_plugins=frozenset({"autograd.materialised_saved"}))
    blocked = aot(graph, options)
    assert "aten.gelu.default" in [op.name for op in blocked.backward.ops()]  # recomputed


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
def test_norm_gelu_block_matches_eager_and_saves_no_more(aot, kind):
    graph = _norm_block(kind)
    aot.check_training(graph, _randn(graph, seed=1))
    report = saved_activation_report(graph, _randn(graph))
    assert report.compiled_bytes <= report.eager_bytes
    assert report.compiled_activation_bytes <= report.eager_activation_bytes


@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax])
def test_softmax_and_log_softmax(aot, fn):
    b, (x,) = _builder(x=((5, 7), True))
    graph = b.build([_call(b, fn, _call(b, operator.mul, x, 2.0), -1)])
    aot.check_training(graph, _randn(graph))


def test_cross_entropy_with_ignore_index(aot):
    b, (logits, target) = _builder(logits=((6, 5), True), target=((6,), False, torch.int64))
    loss = _call(b, F.cross_entropy, logits, target, ignore_index=-100)
    graph = b.build([loss])
    target_value = torch.tensor([0, 4, -100, 2, -100, 1])
    result = aot.check_training(graph, [_randn(graph)[0], target_value])
    assert result.grad_inputs == (0,)


def test_frozen_params_and_detached_branch(aot):
    b, (x, w, frozen) = _builder(x=((4, 8), True), w=((8, 8), True), frozen=((8, 8), False))
    y = _call(b, F.linear, x, w)
    branch = _call(b, torch.tanh, _call(b, torch.Tensor.detach, y))
    out = _call(b, operator.mul, _call(b, F.linear, y, frozen), branch)
    graph = b.build([out, branch])
    result = aot.check_training(graph, _randn(graph))
    assert result.grad_inputs == (0, 1)
    assert result.tangent_outputs == (0,)  # the detached branch gets no tangent


def test_unused_input_gets_no_gradient(aot):
    b, (x, _unused) = _builder(x=((3,), True), unused=((3,), True))
    graph = b.build([_call(b, torch.sin, x)])
    result = aot.check_training(graph, _randn(graph))
    assert result.grad_inputs == (0,)


def test_output_that_is_an_input_passes_its_tangent_through(aot):
    b, (x, y) = _builder(x=((3,), True), y=((3,), True))
    graph = b.build([x, _call(b, operator.mul, x, y)])
    aot.check_training(graph, _randn(graph))


def test_dropout_mask_is_saved_not_recomputed(aot):
    b, (x, w) = _builder(x=((8, 16), True), w=((16, 16), True))
    out = _call(b, F.dropout, _call(b, F.linear, x, w), 0.5, True)
    graph = b.build([_call(b, torch.sin, out)])
    result = aot.check_training(graph, _randn(graph), seed=3)
    random_ops = [op.name for op in result.forward.ops() if "bernoulli" in op.name]
    assert random_ops
    assert not any("bernoulli" in op.name for op in result.backward.ops())


def test_batch_norm_training_updates_running_stats(aot):
    b, (x, weight, bias, mean, var) = _builder(
        x=((4, 3, 5), True),
        weight=((3,), True),
        bias=((3,), True),
        mean=((3,), False),
        var=((3,), False),
    )
    out = _call(b, F.batch_norm, x, mean, var, weight, bias, training=True, momentum=0.1)
    graph = b.build([_call(b, F.relu, out)])
    inputs = _randn(graph)
    inputs[4] = inputs[4].abs() + 0.5
    result = aot.check_training(graph, inputs)
    assert result.mutated_inputs == (3, 4)
    assert result.grad_inputs == (0, 1, 2)


def test_batch_norm_module_through_fx(aot):
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(6, 4)

        def forward(self, x, weight, bias, mean, var, count):
            count.add_(1)
            y = F.batch_norm(self.lin(x), mean, var, weight, bias, True, 0.1, 1e-5)
            return F.gelu(y)

    module = Block().double()
    traced = torch.fx.symbolic_trace(module)
    example = [
        torch.randn(5, 6, dtype=F64, requires_grad=True),
        torch.randn(4, dtype=F64, requires_grad=True),
        torch.randn(4, dtype=F64, requires_grad=True),
        torch.zeros(4, dtype=F64),
        torch.ones(4, dtype=F64),
        torch.zeros((), dtype=torch.int64),
    ]
    # lift the Linear's parameters to inputs by calling F.linear with them
    graph = _lift_linear(traced, example, module.lin)
    inputs = [*(t.detach() for t in example), module.lin.weight.detach(), module.lin.bias.detach()]
    result = aot.check_training(graph, inputs)
    assert result.mutated_inputs == (3, 4, 5)


def _lift_linear(traced, example, linear):
    """Rewrite ``call_module`` Linear nodes as ``F.linear`` over two new placeholders."""
    graph = traced.graph
    last = [n for n in graph.nodes if n.op == "placeholder"][-1]
    with graph.inserting_after(last):
        bias = graph.placeholder("lin_bias")
    with graph.inserting_after(last):
        weight = graph.placeholder("lin_weight")
    for node in list(graph.nodes):
        if node.op == "call_module":
            with graph.inserting_before(node):
                new = graph.call_function(F.linear, (node.args[0], weight, bias))
            node.replace_all_uses_with(new)
            graph.erase_node(node)
    traced.recompile()
    params = [linear.weight.detach().requires_grad_(), linear.bias.detach().requires_grad_()]
    return from_fx(traced, [*example, *params])


def test_cuda_training_graph_is_traced_without_a_gpu():
    graph = parse(
        """
        graph torch {
          %x: f32[64, 128] cuda:0 grad = input
          %b: f32[128] cuda:0 grad = input
          %a: f32[64, 128] cuda:0 = operator.add(%x, %b)
          %g: f32[64, 128] cuda:0 = torch.nn.functional.gelu(%a)
          %s: f32[64, 128] cuda:0 = torch.softmax(%g, -1)
          return %s
        }
        """
    )
    result = aot(graph)
    for part in (result.forward, result.backward):
        verify(part)
        metas = [node.meta for node in part.all_nodes()]
        assert {meta.device for meta in metas} == {torch.device("cuda", 0)}
    assert [op.name for op in result.forward.ops()] == [  # softmax spelled out for the cut
        "aten.add.Tensor",
        "aten.gelu.default",
        "aten.amax.default",
        "aten.sub.Tensor",
        "aten.exp.default",
        "aten.sum.dim_IntList",
        "aten.div.Tensor",
    ]
    assert "aten.detach.default" not in [op.name for op in result.backward.ops()]
