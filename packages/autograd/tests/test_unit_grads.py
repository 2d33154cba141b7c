"""Unit gradients: which forwards compute their scalar output's gradients for a tangent
of 1 (``AotResult.num_unit_grads``), checked against eager autograd by ``check_training``."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F

from torchstrata.autograd import aot
from torchstrata.core import (
    AutogradOptions,
    CompileOptions,
    GraphBuilder,
    Level,
    TensorMeta,
    torch_op,
)

F64 = torch.float64


def _graph(loss_fn, **shapes):
    """A torch graph of ``loss_fn`` over f64 inputs that require grad."""
    b = GraphBuilder(Level.TORCH)
    nodes = [
        b.input(name, TensorMeta(shape, F64, requires_grad=True)) for name, shape in shapes.items()
    ]
    return b.build(list(loss_fn(b, *nodes)))


def _call(b, fn, *args, **kwargs):
    return b.call(torch_op(fn), *args, **kwargs)


def _randn(graph):
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(m.shape, generator=generator, dtype=m.dtype) for m in graph.input_metas]


def _log_softmax_loss(b, x, w):
    scaled = _call(b, operator.mul, x, w)
    return (_call(b, torch.sum, _call(b, torch.log_softmax, scaled, -1)),)


def test_a_scalar_loss_forward_returns_its_unit_gradients(aot):
    graph = _graph(_log_softmax_loss, x=(4, 9), w=(9,))
    result = aot.check_training(graph, _randn(graph))  # unit grads * tangent == eager's
    assert result.num_unit_grads == 2 == len(result.grad_inputs)
    outputs = result.forward.outputs
    assert len(outputs) == 1 + result.num_saved + 2
    assert [node.tensor_meta.shape for node in outputs[-2:]] == [(4, 9), (9,)]


@pytest.mark.parametrize(
    "loss_fn",
    [
        # two outputs: two tangents
        lambda b, x, w: (_call(b, torch.sum, x), _call(b, torch.sum, _call(b, torch.exp, w))),
        # a non-scalar output
        lambda b, x, w: (_call(b, torch.exp, _call(b, operator.mul, x, w)),),
        # a matmul's gradient: compute, not traffic
        lambda b, x, w: (_call(b, torch.sum, _call(b, torch.matmul, x, w)),),
    ],
    ids=["two-outputs", "non-scalar", "matmul"],
)
def test_other_graphs_keep_their_gradients_in_the_backward(aot, loss_fn):
    graph = _graph(loss_fn, x=(4, 9), w=(9,))
    result = aot.check_training(graph, _randn(graph))
    assert result.num_unit_grads == 0
    assert len(result.forward.outputs) == len(graph.outputs) + result.num_saved


def test_the_typed_option_the_stage_option_and_from_env_switch_it_off():
    graph = _graph(_log_softmax_loss, x=(4, 9), w=(9,))
    off = CompileOptions(stage_options={"autograd": {"unit_grads": False}})
    assert aot(graph, off).num_unit_grads == 0
    assert aot(graph, CompileOptions()).num_unit_grads == 2
    typed = CompileOptions(autograd=AutogradOptions(unit_grads=False))
    assert aot(graph, typed).num_unit_grads == 0
    from_env = AutogradOptions.from_env({"TORCHSTRATA_UNIT_GRADS": "0"})
    assert aot(graph, CompileOptions(autograd=from_env)).num_unit_grads == 0


def test_cross_entropy_moves_its_gradient_and_keeps_its_backward(aot):
    b = GraphBuilder(Level.TORCH)
    logits = b.input("logits", TensorMeta((6, 5), F64, requires_grad=True))
    target = b.input("target", TensorMeta((6,), torch.int64))
    graph = b.build([_call(b, F.cross_entropy, logits, target)])
    target_value = torch.tensor([0, 4, -100, 2, -100, 1])
    logits_value = torch.randn(6, 5, dtype=F64, generator=torch.Generator().manual_seed(0))
    result = aot.check_training(graph, [logits_value, target_value])
    assert result.num_unit_grads == 1
    # the backward graph still computes the gradient from the saved values
    assert result.backward is not None and len(result.backward.outputs) == 1
