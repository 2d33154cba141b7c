"""``InductorOptions(half_roundings=False)`` end to end: a 16-bit chain kept in float32
through a fused kernel, rounded only where stored, as torch.compile computes (0525)."""

from __future__ import annotations

import pytest
import torch

import torchstrata.runtime as tsr
from torchstrata.core import CompileOptions, InductorOptions

DTYPES = [torch.bfloat16, torch.float16]


def _silu_mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x) * y


def _compiled(codegen: str, half_roundings: bool):
    options = CompileOptions(inductor=InductorOptions(half_roundings=half_roundings))
    return tsr.compile(_silu_mul, codegen=codegen, options=options)


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_float32_through_the_kernel(codegen, dtype, monkeypatch):
    if codegen == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(37, 129, generator=gen).to(dtype)
    y = torch.randn(37, 129, generator=gen).to(dtype)
    eager = _silu_mul(x, y)
    exact = _silu_mul(x.double(), y.double())
    rounding, through = _compiled(codegen, True), _compiled(codegen, False)
    assert torch.equal(rounding(x, y), eager)  # the default: eager's bits
    ours = through(x, y)
    assert ours.dtype == dtype
    # one rounding (the store's) instead of one per op: nearer the exact value than eager
    assert (ours.double() - exact).abs().max() <= (eager.double() - exact).abs().max()
    eps = torch.finfo(dtype).eps  # the roundings eager made differ by a unit at most
    torch.testing.assert_close(ours, eager, rtol=2 * eps, atol=eps)
    report = tsr.explain(through, x, y)
    (kernel,) = report.kernels
    default_source = tsr.explain(rounding, x, y).kernels[0].source
    marker = "_ts_round_bf16(" if codegen == "triton" and dtype is torch.bfloat16 else None
    if marker is not None:  # the interpreter rounds bf16 through a helper: count its calls
        assert kernel.source.count(marker) < default_source.count(marker)
    else:
        assert kernel.source != default_source
