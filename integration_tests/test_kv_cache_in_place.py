"""A static KV cache updated with ``index_copy_`` under ``torch.no_grad()``: the compiled
step updates the cache buffers in place (no copy of the whole cache and no write-back
copy), and every step's output and cache match eager's."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import torchstrata.runtime as rt


class CachedAttention(nn.Module):
    """One head of attention over a static cache of 16 positions."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.register_buffer("k_cache", torch.zeros(16, 8))
        self.register_buffer("v_cache", torch.zeros(16, 8))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).split(8, dim=-1)
        keys = self.k_cache.index_copy_(0, pos, k)
        values = self.v_cache.index_copy_(0, pos, v)
        mask = torch.arange(16, device=pos.device) > pos
        scores = (q @ keys.T).masked_fill(mask, float("-inf"))
        return scores.softmax(-1) @ values


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    "codegen",
    [
        "cpp",
        "triton",
        "eager",
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
        ),
    ],
)
def test_decode_steps_update_the_cache_in_place(codegen, monkeypatch):
    if codegen == "triton":
        pytest.importorskip("triton")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    device = "cuda" if codegen == "cuda" else "cpu"
    torch.manual_seed(0)
    model = CachedAttention().to(device)
    reference = copy.deepcopy(model)
    compiled = rt.compile(model, codegen="triton" if codegen == "cuda" else codegen)
    with torch.no_grad():
        for step in range(4):
            x, pos = torch.randn(1, 8, device=device), torch.tensor([step], device=device)
            ops = _Ops()
            with ops:
                got = compiled(x, pos)
            want = reference(x, pos)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(model.k_cache, reference.k_cache)
            torch.testing.assert_close(model.v_cache, reference.v_cache)
            if codegen != "eager" and step > 0:  # the first call also compiles
                assert ops.seen.count("aten.index_copy_.default") == 2, ops.seen
                assert "aten.index_copy.default" not in ops.seen
                if codegen != "triton":  # Triton's interpreter copies its tensors itself
                    assert "aten.copy_.default" not in ops.seen
