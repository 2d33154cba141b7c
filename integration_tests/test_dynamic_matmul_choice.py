"""float32 CPU matmuls of a lowering made once for many sizes choose oneDNN or ATen per
call's size (decision 0466): with oneDNN forced, timed (the default) or off, an inference
forward and a training step (a weight gradient's transposed left operand) lowered for many
sizes equal eager at every size, odd and one rows included, and the forced lowerings call
oneDNN's linear at a size they were not lowered at."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchstrata.runtime as tsr
from torchstrata.core import CompileOptions, InductorOptions
from torchstrata.inductor.launch.cpu_matmuls import onednn_available

pytestmark = [
    pytest.mark.usefixtures("size_counts_no_fallback"),
    pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN"),
]
CHOICES = pytest.mark.parametrize("onednn", [True, None, False], ids=["onednn", "timed", "aten"])


def softmax_gelu(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """bench.dynamic_sizes' ``softmax_gelu``."""
    return torch.softmax(F.gelu(x @ w), -1) * 2


def _options(onednn: bool | None) -> CompileOptions:
    return CompileOptions(inductor=InductorOptions(onednn_matmuls=onednn))


def _onednn_linears(fn, *args) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn(*args)
    return sum(event.count for event in prof.key_averages() if "_linear_pointwise" in event.key)


@CHOICES
def test_an_inference_forward_for_many_sizes_equals_eager_at_every_size(onednn) -> None:
    torch.manual_seed(0)
    compiled = tsr.compile(softmax_gelu, dynamic=True, codegen="cpp", options=_options(onednn))
    w = torch.randn(64, 48)
    rows = (17, 300, 33, 2, 255, 64, 1, 17)
    for n in rows:
        x = torch.randn(n, 64)
        torch.testing.assert_close(compiled(x, w), softmax_gelu(x, w), rtol=1e-4, atol=1e-5)
    stats = tsr.size_lowering_stats()  # lowerings by row bucket (0435), none per size
    assert stats.get("per_size", 0) == 0 and stats.get("reused", 0) >= 4, stats
    linears = _onednn_linears(compiled, torch.randn(129, 64), w)
    assert linears == (1 if onednn else 0) or onednn is None  # timed: this CPU's choice


class _MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(32, 96)
        self.down = nn.Linear(96, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x))).square().mean()


@CHOICES
def test_a_training_step_for_many_sizes_equals_eager_at_every_size(onednn) -> None:
    """Forward ``addmm``s, the backward's ``g @ W`` and weight gradients ``g^T @ x``
    (a transposed left operand over the symbolic rows)."""
    torch.manual_seed(0)
    model = _MLP()
    compiled = tsr.compile(model, dynamic=True, codegen="cpp", options=_options(onednn))
    for n in (9, 40, 13, 129, 9):
        x = torch.randn(n, 32)
        grads = []
        for fn in (model, compiled):
            model.zero_grad(set_to_none=True)
            loss = fn(x)
            loss.backward()
            grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
        (want_loss, want), (loss, got) = grads
        torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-6)
        for value, expected in zip(got, want, strict=True):
            torch.testing.assert_close(value, expected, rtol=1e-4, atol=1e-6)
    stats = tsr.size_lowering_stats()
    assert stats.get("per_size", 0) == 0 and stats.get("reused", 0) >= 2, stats
    # 2 forward addmm, the down layer's input gradient, both weight gradients
    linears = _onednn_linears(lambda x: compiled(x).backward(), torch.randn(40, 32))
    assert linears == (5 if onednn else 0) or onednn is None
