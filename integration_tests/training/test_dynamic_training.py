"""Training with dynamic shapes (decision 0205): a symbolic entry for graphs whose
inputs require grad. The forward and backward are lowered per size from one symbolic
capture; every step is compared with eager (and a float64 reference), and the entries
and per-size lowerings are counted."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchstrata.runtime as rt

from .models import MLP, TwoBlocks, assert_matches, twin

#: Sequence lengths: odd, even, small and large (never 0 or 1).
SIXTEEN = (16, 17, 5, 33, 2, 64, 9, 40, 3, 11, 23, 7, 128, 31, 6, 19)


class MLPLoss(nn.Module):
    """An MLP over rows and a mean-squared-error loss."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = MLP()

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.mlp(x), target)


def _count_lowerings(monkeypatch, compiled) -> list[object]:
    """Every graph the compiled module's pipeline lowers (one per size and entry)."""
    lowered: list[object] = []
    pipeline = compiled.compiled_forward.pipeline
    original = pipeline.compile_graph

    def counting(graph, options, aot=None):
        lowered.append(graph)
        return original(graph, options, aot)

    monkeypatch.setattr(pipeline, "compile_graph", counting)
    return lowered


def _train(model, codegen, shapes, monkeypatch):
    """One SGD step per shape through the compiled model, its eager twin and a float64
    twin; losses, input gradients and parameters compared after every step."""
    eager, reference = twin(model), twin(model, torch.float64)
    compiled = rt.compile(model, codegen=codegen)
    lowered = _count_lowerings(monkeypatch, compiled)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (model, eager, reference)]
    for shape in shapes:
        x, target = torch.randn(shape), torch.randn(shape)
        results = []
        for fn, dtype, optimizer in zip(
            (compiled, eager, reference), (torch.float32, torch.float32, torch.float64), optimizers
        ):
            xs = x.to(dtype).clone().requires_grad_()
            loss = fn(xs, target.to(dtype))
            loss.backward()
            grads = [p.grad.clone() for p in optimizer.param_groups[0]["params"]]
            optimizer.step()
            optimizer.zero_grad()
            results.append([loss.detach(), xs.grad, *grads])
        assert_matches(*results, what=f"shape {shape}: loss, input grad, param grads")
    return compiled, lowered


@pytest.mark.slow  # 16 sizes of two blocks: 16 joint traces (about 40 s on 2 cores)
def test_two_block_transformer_sixteen_sequence_lengths(monkeypatch):
    model = TwoBlocks()
    shapes = [(2, n, 32) for n in SIXTEEN]
    compiled, lowered = _train(model, "eager", shapes, monkeypatch)
    # static for the first length, one symbolic entry for the other fifteen
    assert len(compiled.compiled_forward.cache) == 2
    assert len(lowered) == len(SIXTEEN)
    assert (
        "dimension 1 of L['x'] becomes symbolic" in compiled.compiled_forward.recompile_reasons[0]
    )


def test_one_block_eight_sequence_lengths(monkeypatch):
    model = TwoBlocks()
    model.second = nn.Identity()
    shapes = [(2, n, 32) for n in (8, 9, 5, 17, 2, 12, 31, 3)]
    compiled, lowered = _train(model, "eager", shapes, monkeypatch)
    assert len(compiled.compiled_forward.cache) == 2
    assert len(lowered) == len(shapes)


def test_generated_kernels_forward_and_backward_per_batch_size(monkeypatch):
    # the symbolic entry's sizes are served by forwards and backwards lowered once for
    # many sizes (decision 0395) where their conditions hold, else per size
    rt.reset_size_lowering_stats()
    shapes = [(n, 16) for n in (8, 9, 5, 17, 2, 12, 31, 3)]
    model = MLPLoss()
    model.mlp.fc3 = nn.Linear(32, 16)
    compiled, lowered = _train(model, "cpp", shapes, monkeypatch)
    assert len(compiled.compiled_forward.cache) == 2
    stats = rt.size_lowering_stats()
    assert len(lowered) == 1 + stats.get("per_size", 0)  # the static entry, then per size
    served = stats.get("symbolic", 0) + stats.get("reused", 0) + stats.get("per_size", 0)
    assert served == len(shapes) - 1 and stats.get("symbolic", 0) >= 1, stats
    report = str(rt.explain(compiled, torch.randn(6, 16, requires_grad=True), torch.randn(6, 16)))
    assert "dimension 0 of L['x'] becomes symbolic" in report


def test_repeated_sizes_reuse_their_lowering(monkeypatch):
    model = MLPLoss()
    model.mlp.fc3 = nn.Linear(32, 16)
    shapes = [(n, 16) for n in (4, 5, 6, 5, 4, 6, 7)]
    compiled, lowered = _train(model, "eager", shapes, monkeypatch)
    assert len(compiled.compiled_forward.cache) == 2
    assert len(lowered) == 4  # 4 (the static entry), then 5, 6 and 7 once each
