"""A pre-norm residual MLP stack trains with eager's gradients, and its backward reads
the GELUs that the forward wrote for the second matmuls rather than recomputing them in a
kernel of its own (decision 0260)."""

from __future__ import annotations

import torch
from torch import nn

import torchstrata.runtime as rt


class Stack(nn.Module):
    def __init__(self, layers: int = 3, width: int = 16) -> None:
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(layers))
        self.ups = nn.ModuleList(nn.Linear(width, 4 * width) for _ in range(layers))
        self.downs = nn.ModuleList(nn.Linear(4 * width, width) for _ in range(layers))

    def forward(self, x):
        for norm, up, down in zip(self.norms, self.ups, self.downs, strict=True):
            x = x + down(nn.functional.gelu(up(norm(x))))
        return x.square().mean()


def _grads(model, fn, x):
    for p in model.parameters():
        p.grad = None
    loss = fn(x)
    loss.backward()
    return loss, {name: p.grad.clone() for name, p in model.named_parameters()}


def _backward_kernels(model, x, blocked):
    compiled = rt.compile(model, codegen="cpp", options={"blocked_plugins": blocked})
    want_loss, want = _grads(model, model, x)
    loss, got = _grads(model, compiled, x)
    torch.testing.assert_close(loss, want_loss)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5)
    report = rt.explain(compiled, x)
    return [k for k in report.kernels if k.backend == "cpp"]


def test_the_backward_reads_the_saved_gelus_and_residual_stream():
    model = Stack()
    x = torch.randn(2, 8, 16)
    kernels = _backward_kernels(model, x, [])
    before = _backward_kernels(model, x, ["autograd.materialised_saved"])
    assert len(kernels) == len(before) - 1  # the backward's GELU recompute
    # the GELU itself (0.5 * x * (1 + erf(x / sqrt(2)))) is computed once, in the forward
    # kernels, and its derivative in the backward's: 6 kernels with erf, not 7
    assert sum("erf" in k.source for k in kernels) == 6
    assert sum("erf" in k.source for k in before) == 7
