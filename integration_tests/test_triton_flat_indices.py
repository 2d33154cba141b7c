"""Triton kernels index over the flat ``xindex`` where that divides less (decision 0521),
end to end on the CPU under Triton's interpreter: RoPE's loads of ``q`` and ``k`` are
``xindex`` plus an offset, a broadcast operand at odd sizes is one remainder, and every
result is eager's (and on a GPU, ``gpu`` mark). ``InductorOptions(flat_indices=False)``
is the per-dim form."""

from __future__ import annotations

import re

import pytest
import torch

import torchstrata.runtime as tsr
from torchstrata.core import CompileOptions, InductorOptions

from .triton_devices import TRITON_DEVICES


def rope(q, k, cos, sin):
    # as packages/inductor/benchmarks/gpu_kernels.py's K8
    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def scale_and_add(x, w):
    return x * w + x


def _compiled(fn, flat_indices: bool = True):
    options = CompileOptions(inductor=InductorOptions(flat_indices=flat_indices))
    return tsr.compile(fn, codegen="triton", options=options)


def _body(source: str) -> str:
    """The kernel function of a module (its helpers before it are not counted)."""
    return source.split("\ndef kernel", 1)[1]


def _divisions(source: str) -> int:
    return len(re.findall(r" // | % ", _body(source)))


def _load_offsets(source: str, buffer: str) -> list[str]:
    return re.findall(rf"tl\.load\({buffer} \+ \((.*?)\), ", _body(source))


def _randn(*shape: int, device: str) -> torch.Tensor:
    return torch.randn(*shape, generator=_GEN).to(device)


_GEN = torch.Generator().manual_seed(0)


def _both_forms(fn, *args: torch.Tensor) -> tuple[str, str]:
    """``fn`` compiled with flat and with per-dim indices, both checked against eager and
    each other bit for bit: the one kernel's source of each (flat, per-dim)."""
    flat, per_dim = _compiled(fn), _compiled(fn, flat_indices=False)
    torch.testing.assert_close(flat(*args), fn(*args))
    torch.testing.assert_close(flat(*args), per_dim(*args), rtol=0, atol=0)
    (new,) = tsr.explain(flat, *args).kernels
    (old,) = tsr.explain(per_dim, *args).kernels
    return new.source, old.source


def _on(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton")
    if device == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.mark.parametrize("device", TRITON_DEVICES)
@pytest.mark.parametrize("shape", [(2, 4, 32, 16), (2, 3, 17, 12)], ids=["pow2", "odd"])
def test_the_rope_kernel_loads_q_and_k_without_a_division(shape, device, monkeypatch):
    _on(device, monkeypatch)
    q, k = (_randn(*shape, device=device) for _ in range(2))
    cos, sin = (_randn(*shape[-2:], device=device) for _ in range(2))
    compiled = _compiled(rope)
    for ours, eager in zip(compiled(q, k, cos, sin), rope(q, k, cos, sin), strict=True):
        torch.testing.assert_close(ours, eager)
    (kernel,) = tsr.explain(compiled, q, k, cos, sin).kernels
    for buffer in ("buf_q", "buf_k"):
        offsets = _load_offsets(kernel.source, buffer)
        assert len(offsets) == 3  # the element and the two halves of rotate_half
        assert all("//" not in offset and "%" not in offset for offset in offsets), offsets
    # cos and sin [t, d] are one remainder of the flat index each
    for buffer in ("buf_cos", "buf_sin"):
        (offset,) = _load_offsets(kernel.source, buffer)
        assert offset.count("%") == 1 and "//" not in offset, offset


@pytest.mark.parametrize("device", TRITON_DEVICES)
@pytest.mark.parametrize(
    ("shape", "weight"),
    [((123, 4095), (4095,)), ((7, 13, 33), (13, 33))],
    ids=["rows", "suffix"],
)
def test_a_broadcast_weight_at_odd_sizes_divides_less(shape, weight, device, monkeypatch):
    _on(device, monkeypatch)
    x, w = _randn(*shape, device=device), _randn(*weight, device=device)
    new, old = _both_forms(scale_and_add, x, w)
    assert _divisions(new) < _divisions(old)
    # x and the output are read and written at xindex itself
    (offset,) = _load_offsets(new, "buf_x")
    assert offset == "xindex + xzero"


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_a_row_kernel_over_odd_rows_stores_at_its_flat_row(device, monkeypatch):
    _on(device, monkeypatch)

    def centred_sums(x, b):
        return (x - x.mean(-1, keepdim=True)).sum(-1) * b

    x, b = _randn(3, 5, 77, device=device), _randn(5, device=device)
    new, old = _both_forms(centred_sums, x, b)
    # rows (3, 5): x at 385*x0 + 77*x1 + r0 is 77*xindex + rindex; b reads x1 = xindex % 5
    assert _divisions(new) < _divisions(old)
    (offset,) = _load_offsets(new, "buf_x")
    assert "//" not in offset and "%" not in offset, offset
