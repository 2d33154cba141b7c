"""One autograd trace for a symbolic entry (decision 0220): the joint trace runs once
on the symbolic graph, each size partitions and lowers it; a size that violates a
condition the trace relied on is traced on its own, and every result equals eager's."""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

import torchstrata.runtime as rt
from integration_tests.dynamic_corpus.programs import layer_norm, softmax_gelu

from .training.models import MLP, TransformerBlock, assert_matches, twin

#: Sizes of the dynamic dimension: odd, even, small and large (never 0 or 1).
SIZES = (16, 17, 5, 33, 2, 64, 9, 40, 3)


def _count_stage_calls(monkeypatch, pipeline) -> list[tuple[str, bool]]:
    """Every (stage, symbolic) hook call the pipeline makes."""
    calls: list[tuple[str, bool]] = []
    original = pipeline._call_stage

    def counting(stage, options, symbolic=False, **kwargs):
        calls.append((stage, symbolic))
        return original(stage, options, symbolic=symbolic, **kwargs)

    monkeypatch.setattr(pipeline, "_call_stage", counting)
    return calls


def test_inference_entry_traces_once_for_every_size(monkeypatch):
    for fn in (softmax_gelu, layer_norm):
        compiled = rt.compile(fn, codegen="cpp", dynamic=True)
        calls = _count_stage_calls(monkeypatch, compiled.pipeline)
        w = torch.randn(64, 32)
        for size in SIZES:
            x = torch.randn(size, 64)
            torch.testing.assert_close(compiled(x, w), fn(x, w), msg=lambda m, s=size: f"{s}: {m}")
        assert len(compiled.cache) == 1
        assert calls.count(("autograd", True)) == 1, calls  # the symbolic trace
        assert calls.count(("autograd", False)) == 0, calls  # no trace per size
        assert calls.count(("codegen", False)) == len(SIZES)


class TwoBlocks(nn.Module):
    """Two transformer blocks and a mean-squared-error loss against a target."""

    def __init__(self) -> None:
        super().__init__()
        self.first = TransformerBlock()
        self.second = TransformerBlock()

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.second(self.first(x)), target)


class MeanLoss(nn.Module):
    """An MLP and the mean of its output (its backward divides by a symbolic count)."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = MLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x).pow(2).mean()


def _train(compiled, model, shapes, args):
    """One SGD step per shape through the compiled model and its eager twin; loss, input
    gradient and parameter gradients compared after every step."""
    eager = twin(model)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (model, eager)]
    for shape in shapes:
        inputs = args(shape)
        results = []
        for fn, optimizer in zip((compiled, eager), optimizers, strict=True):
            x = inputs[0].clone().requires_grad_()
            loss = fn(x, *inputs[1:])
            loss.backward()
            grads = [p.grad.clone() for p in optimizer.param_groups[0]["params"]]
            optimizer.step()
            optimizer.zero_grad()
            results.append([loss.detach(), x.grad, *grads])
        assert_matches(*results, what=f"shape {shape}: loss, input grad, param grads")


def test_training_entry_traces_once_for_every_size(monkeypatch):
    model = TwoBlocks()
    compiled = rt.compile(model, codegen="eager", dynamic=True)
    calls = _count_stage_calls(monkeypatch, compiled.compiled_forward.pipeline)
    shapes = [(2, n, 32) for n in SIZES]
    _train(compiled, model, shapes, lambda s: (torch.randn(s), torch.randn(s)))
    assert len(compiled.compiled_forward.cache) == 1
    assert calls.count(("autograd", True)) == 1, calls
    assert calls.count(("autograd", False)) == 0, calls


def test_training_mean_loss_generated_kernels_trace_once(monkeypatch):
    model = MeanLoss()
    compiled = rt.compile(model, codegen="cpp", dynamic=True)
    calls = _count_stage_calls(monkeypatch, compiled.compiled_forward.pipeline)
    _train(compiled, model, [(n, 16) for n in SIZES], lambda s: (torch.randn(s),))
    assert len(compiled.compiled_forward.cache) == 1
    assert calls.count(("autograd", True)) == 1, calls
    assert calls.count(("autograd", False)) == 0, calls


def conv_relu(x, w):
    return F.conv1d(x, w, padding=1).relu().sum(-1)


def test_a_size_outside_the_traces_conditions_is_traced_on_its_own(monkeypatch, caplog):
    # the convolution's backend choice reads the batch size: the trace relies on it
    # staying below 16, so batches of 16 and more are traced per size
    compiled = rt.compile(conv_relu, codegen="cpp", dynamic=True)
    calls = _count_stage_calls(monkeypatch, compiled.pipeline)
    w = torch.randn(4, 3, 3, requires_grad=True)
    batches = (2, 3, 5, 17, 9, 20, 16, 4)
    with caplog.at_level(logging.DEBUG, logger="torchstrata.runtime"):
        for batch in batches:
            x = torch.randn(batch, 3, 11)
            got, want = compiled(x, w), conv_relu(x, w)
            torch.testing.assert_close(got, want, msg=lambda m, b=batch: f"batch {b}: {m}")
            (gw,) = torch.autograd.grad(got.sum(), w)
            (ww,) = torch.autograd.grad(want.sum(), w)
            torch.testing.assert_close(gw, ww)
    assert len(compiled.cache) == 1
    assert calls.count(("autograd", True)) == 1, calls
    outside = sum(batch >= 16 for batch in batches)
    assert calls.count(("autograd", False)) == outside, calls
    assert "which the symbolic trace relied on" in caplog.text
