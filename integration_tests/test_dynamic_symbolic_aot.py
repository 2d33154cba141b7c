"""One autograd trace for a symbolic entry (decision 0220): the joint trace runs once
on the symbolic graph, each size partitions and lowers it; a size that violates a
condition the trace relied on is traced on its own, and every result equals eager's."""

from __future__ import annotations

import importlib
import logging

import torch
import torch.nn.functional as F
from torch import nn

import torchstrata.runtime as rt
from integration_tests.dynamic_corpus.programs import layer_norm, pointwise, softmax_gelu
from torchstrata.runtime.dynamic_shapes import SizeSpecialisedRunner

from .training.models import MLP, TwoBlocks, assert_matches, twin

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
        # each size lowered on its own (the lowering once of 0381 has tests of its own)
        options = {"symbolic_lowering": False}
        compiled = rt.compile(fn, codegen="cpp", dynamic=True, options=options)
        calls = _count_stage_calls(monkeypatch, compiled.pipeline)
        w = torch.randn(64, 32)
        for size in SIZES:
            x = torch.randn(size, 64)
            torch.testing.assert_close(compiled(x, w), fn(x, w), msg=lambda m, s=size: f"{s}: {m}")
        assert len(compiled.cache) == 1
        assert calls.count(("autograd", True)) == 1, calls  # the symbolic trace
        assert calls.count(("autograd", False)) == 0, calls  # no trace per size
        assert calls.count(("codegen", False)) == len(SIZES)


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


def _count_partitions(monkeypatch) -> list[int]:
    """One entry per min-cut partition the autograd stage runs."""
    aot_module = importlib.import_module("torchstrata.autograd.aot")  # the name is the function
    calls: list[int] = []
    real = aot_module.partition

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(aot_module, "partition", counted)
    return calls


def test_training_entry_traces_once_for_every_size(monkeypatch):
    model = TwoBlocks()
    compiled = rt.compile(model, codegen="eager", dynamic=True)
    calls = _count_stage_calls(monkeypatch, compiled.compiled_forward.pipeline)
    partitions = _count_partitions(monkeypatch)
    shapes = [(2, n, 32) for n in SIZES]
    _train(compiled, model, shapes, lambda s: (torch.randn(s), torch.randn(s)))
    assert len(compiled.compiled_forward.cache) == 1
    assert calls.count(("autograd", True)) == 1, calls
    assert calls.count(("autograd", False)) == 0, calls
    # the symbolic joint graph is partitioned once, not per size (decision 0280)
    assert len(partitions) == 1, partitions


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


def test_sizes_outside_the_traces_condition_get_a_trace_of_their_own(monkeypatch, caplog):
    # the convolution's backend choice reads the batch size: the first trace relies on
    # it staying below 16, so batches of 16 and more get a second symbolic trace
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
    assert calls.count(("autograd", True)) == 2, calls
    assert calls.count(("autograd", False)) == 0, calls
    assert "a symbolic trace for them" in caplog.text


def _runner_with_fake_traces(condition):
    """A runner over ``pointwise``'s symbolic graph whose symbolic traces are stand-ins
    relying on ``condition(symbol, hint)``; it records the hints traced at and, per
    size, whether a trace served it."""
    from torchstrata.capture import capture
    from torchstrata.core import SymbolicAot, SymbolicSizes, interpret, symbolic_scope

    sizes = SymbolicSizes({"L['x']": [0]})
    with symbolic_scope(sizes):
        graph = capture(pointwise, (torch.randn(6, 64), torch.randn(64, 32)), {}).graphs[0]
    symbol = graph.inputs[0].meta.shape[0].node.expr
    traced_at, served = [], {}

    def trace(graph, hints):
        hint = 6 if hints is None else hints[symbol.name]
        traced_at.append(hint)
        return SymbolicAot(graph, (condition(symbol, hint),), lambda values: values[symbol.name])

    def lower(static, aot=None):
        served[static.inputs[0].meta.shape[0]] = None if aot is None else aot()
        return lambda *inputs: interpret(static, *inputs)

    return SizeSpecialisedRunner(graph, lower, trace=trace), traced_at, served


def test_a_second_symbolic_trace_for_sizes_outside_an_inequality():
    runner, traced_at, served = _runner_with_fake_traces(
        lambda s, hint: s < 16 if hint < 16 else s >= 16
    )
    w = torch.randn(64, 32)
    for size in (6, 7, 20, 21, 8, 16, 3):
        x = torch.randn(size, 64)
        torch.testing.assert_close(runner.call(x, w)[0], pointwise(x, w))
    assert traced_at == [6, 20]
    assert served == {6: 6, 7: 7, 20: 20, 21: 21, 8: 8, 16: 16, 3: 3}


def test_sizes_outside_an_equality_are_traced_on_their_own():
    import sympy

    runner, traced_at, served = _runner_with_fake_traces(lambda s, hint: sympy.Eq(s, hint))
    w = torch.randn(64, 32)
    for size in (6, 7, 20, 6, 8):
        x = torch.randn(size, 64)
        torch.testing.assert_close(runner.call(x, w)[0], pointwise(x, w))
    assert traced_at == [6]  # a trace for one size: another would be for one size too
    assert served == {6: 6, 7: None, 20: None, 8: None}
