"""Conv2d + BatchNorm2d in training mode: outputs, gradients and the running statistics
(``running_mean``, ``running_var``, ``num_batches_tracked``) exactly as eager, over
several steps; through ``compile()`` and through the stages without capture."""

from __future__ import annotations

import torch

import torchstrata.runtime as rt
from torchstrata.core import CompileOptions, from_fx

from .models import ConvBN, assert_matches, leaf, lift_to_inputs, module_tensors, step, twin

STEPS = 2


def _buffers(model):
    return [model.bn.running_mean, model.bn.running_var, model.bn.num_batches_tracked]


def _check_against_eager(run, model, eager_model, inputs):
    for index in range(STEPS):
        model.zero_grad(set_to_none=True)
        eager_model.zero_grad(set_to_none=True)
        xs = [leaf(t) for t in inputs]
        ours = step(run, model, xs)
        eager = step(eager_model, eager_model, [leaf(t) for t in inputs])
        assert_matches([ours[0], *ours[1]], [eager[0], *eager[1]], what=f"step {index}")
        assert_matches(_buffers(model), _buffers(eager_model), what=f"step {index} stats")
    assert int(model.bn.num_batches_tracked) == STEPS


def test_conv_batchnorm_training_through_compile(codegen):
    model = ConvBN().double()
    eager_model = twin(model)
    compiled = rt.compile(model, codegen=codegen)
    x = torch.randn(2, 3, 5, 5, dtype=torch.float64, requires_grad=True)
    _check_against_eager(compiled, model, eager_model, [x])
    report = rt.explain(compiled, x)
    assert report.graph_count == 1 and report.graph_break_count == 0


def test_conv_batchnorm_training_without_capture(codegen):
    """torch.fx trace (parameters and buffers lifted to inputs) -> from_fx -> the
    runtime's Pipeline (aot, decomp, codegen): autograd and write-backs of the running
    statistics without the capture stage."""
    model = ConvBN().double()
    eager_model = twin(model)
    gm, names = lift_to_inputs(model)
    x = torch.randn(2, 3, 5, 5, dtype=torch.float64, requires_grad=True)
    state = module_tensors(model, names)
    graph = from_fx(gm, [x, *state])
    artifacts = rt.Pipeline().compile_graph(graph, CompileOptions(codegen=codegen))
    assert artifacts.aot is not None and artifacts.aot.backward is not None
    mutated = {names[i - 1] for i in artifacts.aot.mutated_inputs}
    assert mutated == {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}

    def run(x):
        (out,) = artifacts.runner(x, *state)
        return out

    _check_against_eager(run, model, eager_model, [x])


def _legit_eval(x, weight, bias, mean, var):
    return torch._native_batch_norm_legit(x, weight, bias, mean, var, False, 0.1, 1e-5)


def test_eval_mode_statistics_left_as_they_are_do_not_break_the_backward() -> None:
    """``_native_batch_norm_legit`` in eval mode marks the running statistics as written
    but returns them as they are; the backward saves them. The runner copied each onto
    itself, which only bumped its version: the backward then refused to run."""
    compiled = rt.compile(_legit_eval, options=CompileOptions(codegen="cpp"))
    x = torch.randn(3, 2, 4, requires_grad=True)
    weight = torch.randn(2, requires_grad=True)
    bias = torch.randn(2, requires_grad=True)
    mean, var = torch.randn(2), torch.rand(2) + 0.5
    cotangent = torch.randn(3, 2, 4)
    eager_out = _legit_eval(x, weight, bias, mean.clone(), var.clone())[0]
    expected = torch.autograd.grad(eager_out, (x, weight, bias), cotangent)
    for _ in range(2):
        out = compiled(x, weight, bias, mean, var)[0]
        got = torch.autograd.grad(out, (x, weight, bias), cotangent)
        for mine, eager in zip(got, expected, strict=True):
            torch.testing.assert_close(mine, eager)
