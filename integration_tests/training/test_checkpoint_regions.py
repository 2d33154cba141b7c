"""``torch.utils.checkpoint.checkpoint`` inside a compiled module, through every stage:
one graph, gradients equal eager's, and a random draw inside the region is the same in
the forward and in the backward's recomputation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import torchstrata.runtime as rt

from .models import twin


class CheckpointedBlock(nn.Module):
    """Layer norm, then a checkpointed MLP (optionally with dropout) added back."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.fc1 = nn.Linear(16, 64)
        self.fc2 = nn.Linear(64, 16)
        self.dropout = dropout

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        hidden = F.dropout(F.gelu(self.fc1(x)), self.dropout, self.training)
        return self.fc2(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + checkpoint(self.mlp, self.norm(x), use_reentrant=False)


def test_checkpointed_block_is_one_graph_with_eager_gradients(codegen):
    _check_block(codegen, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_checkpointed_block_on_cuda():
    """The same block on the GPU (Triton kernels; the backward recomputes the MLP)."""
    _check_block(None, "cuda")


def _check_block(codegen: str | None, device: str) -> None:
    model = CheckpointedBlock().to(device)
    eager = twin(model)
    x = torch.randn(4, 8, 16, device=device, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_(True)
    report = rt.explain(model, x)
    assert report.graph_count == 1 and not report.graph_breaks
    compiled = rt.compile(model, codegen=codegen, fullgraph=True)
    tangent = torch.randn(4, 8, 16, device=device)
    compiled(x).backward(tangent)
    eager(x_eager).backward(tangent)
    torch.testing.assert_close(x.grad, x_eager.grad)
    for (name, got), want in zip(model.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, msg=name)


class CheckpointedDropout(nn.Module):
    """``checkpoint(dropout(x * scale))``: elementwise, so the mask can be read back."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 16))

    def scaled_dropout(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x * self.scale, 0.5, self.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.scaled_dropout, x, use_reentrant=False)


def test_dropout_inside_the_region_is_drawn_once(codegen):
    """``out = mask * 2 * x * scale``, so a unit tangent gives ``scale.grad =
    sum_rows(out / scale)`` and ``x.grad = out / x``: the same mask in the backward as in
    the forward (a mask drawn again would give other gradients)."""
    torch.manual_seed(0)
    model = CheckpointedDropout()
    compiled = rt.compile(model, codegen=codegen, fullgraph=True)
    x = torch.rand(64, 16) + 0.5
    x.requires_grad_(True)
    out = compiled(x)
    out.sum().backward()
    dropped = (out == 0).float().mean().item()
    assert 0.3 < dropped < 0.7  # a real mask
    with torch.no_grad():
        torch.testing.assert_close(model.scale.grad, (out / model.scale).sum(0))
        torch.testing.assert_close(x.grad, out / x)
