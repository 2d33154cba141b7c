"""On the GPU, a bf16 chain rounds where eager rounds: the generated kernel is compiled
without floating-point contraction, so RoPE's ``q * cos + rotate_half(q) * sin`` equals
eager's bit for bit (with contraction, a quarter of its elements were one rounding off)."""

from __future__ import annotations

import pytest
import torch

import torchstrata.runtime as rt

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope(q, k, cos, sin):
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rope_in_16_bits_equals_eager_bit_for_bit(dtype):
    torch.manual_seed(0)
    q, k = (torch.randn(2, 4, 64, 128, device="cuda", dtype=dtype) for _ in range(2))
    cos, sin = (torch.randn(64, 128, device="cuda", dtype=dtype) for _ in range(2))
    got = rt.compile(_rope)(q, k, cos, sin)
    want = _rope(q, k, cos, sin)
    for ours, eagers in zip(got, want, strict=True):
        assert torch.equal(ours, eagers), int((ours != eagers).sum())
