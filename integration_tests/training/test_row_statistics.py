"""Training steps whose backward reuses the forward's row statistics: log-sum-exp and
softmax written out with a max that is not detached, through the whole pipeline with
the ordinary backward graph (unit gradients off). The joint graph's factored sums and
the partitioner's forward-side count of maxima (``torchstrata.autograd``) leave the
log-sum-exp's backward no reduction over the rows (``packages/autograd/tests``); the
gradients must still match float64, with ties for the max and rows of ``-inf``."""

from __future__ import annotations

import pytest
import torch

import torchstrata.runtime as rt
from torchstrata.core import AutogradOptions, CompileOptions


def log_sum_exp_loss(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    x = x.float()
    peak = x.amax(-1, keepdim=True)
    lse = (x - peak).exp().sum(-1).log() + peak.squeeze(-1)
    return (lse * weight).sum()


def log_softmax_loss(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    x = x.float()
    peak = x.amax(-1, keepdim=True)
    shifted = x - peak
    out = shifted - shifted.exp().sum(-1, keepdim=True).log()
    return (out * weight[:, None]).mean()


def softmax_loss(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    x = x.float()
    e = (x - x.amax(-1, keepdim=True)).exp()
    return ((e / e.sum(-1, keepdim=True)) * weight[:, None]).sum()


@pytest.fixture(params=["cpp", "triton"])
def codegen(request, monkeypatch) -> str:
    if request.param == "triton":
        pytest.importorskip("triton")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    return request.param


def _inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(12, 300, generator=generator).to(dtype)
    x[0, [5, 250]] = 7.0  # two maxima
    x[1, :] = 2.5  # every element a maximum
    x[2, 10:] = float("-inf")  # a masked tail
    weight = torch.randn(12, generator=generator)
    return x, weight


@pytest.mark.parametrize("fn", [log_sum_exp_loss, log_softmax_loss, softmax_loss])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("seed", [1.0, 0.37])
def test_gradients_match_float64(codegen, fn, dtype, seed):
    x, weight = _inputs(dtype)
    # unit gradients off: the backward's own row statistics are what this checks
    off = AutogradOptions(unit_grads=False)
    compiled = rt.compile(fn, options=CompileOptions(codegen=codegen, autograd=off))
    for _ in range(2):  # the second call runs the cached graphs
        leaf = x.clone().requires_grad_()
        compiled(leaf, weight).backward(torch.tensor(seed))
        reference = x.double().requires_grad_()
        fn(reference, weight.double()).backward(torch.tensor(seed, dtype=torch.float64))
        assert leaf.grad.dtype == dtype
        tolerance = {"rtol": 2**-7 if dtype == torch.bfloat16 else 1e-5, "atol": 1e-6}
        torch.testing.assert_close(leaf.grad.double(), reference.grad, **tolerance)
