"""Symbolic entries through the Triton backend (decision 0225), on the CPU under Triton's
interpreter (``codegen="triton"``): one symbolic entry over many sizes, each call equal
to eager, and the kernels of rows ``(B, T)`` walked as one, so a new ``B`` or ``T``
generates no new module. Also: the size guard tells devices apart, and
``mode="reduce-overhead"`` no longer keeps a compile from being symbolic.

Modules are counted as the ``.py`` files of a fresh artifact store (one per distinct
kernel source).
"""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as rt
from torchstrata.core import SizeCheck, SymbolicSizes, input_meta, symbolic_scope

pytestmark = pytest.mark.triton

#: (B, T) of a [B, T, 32] activation: odd sizes, a change of B and of T. No B*T is a
#: power of two: an interpreted launch whose block divides the rows drops its masks, a
#: decision that is in the source (such a size is a second module, correctly).
BATCH_AND_LENGTH = ((2, 17), (2, 5), (2, 33), (3, 17), (2, 9), (3, 7), (2, 23), (5, 13), (2, 3))


def norm_attention_scores(x, w):
    # a layer norm, a projection, a softmax over it and a residual row sum: the row
    # kernels walk rows (B, T), with T the symbolic dim of a transformer block
    h = F.layer_norm(x, (x.shape[-1],))
    return torch.softmax(h @ w, -1) + x.sum(-1, keepdim=True)


def scaled_gelu(x, bias):
    # a pointwise kernel over [B, T, 32] (its inner dim stays its own variable)
    return F.gelu(x + bias) * 2


def _modules(store: Path) -> list[str]:
    return sorted(path.name for path in store.rglob("*.py"))


@pytest.mark.parametrize(
    ("fn", "other"),
    [(norm_attention_scores, (32, 32)), (scaled_gelu, (32,))],
    ids=["rows", "pointwise"],
)
def test_a_symbolic_triton_entry_generates_its_modules_once_over_batch_and_length(
    tmp_path, fn, other
):
    pytest.importorskip("triton")
    compiled = rt.compile(fn, dynamic=True, codegen="triton", options={"cache_dir": str(tmp_path)})
    second = torch.randn(*other)
    generated: list[str] = []
    for batch, length in BATCH_AND_LENGTH:
        x = torch.randn(batch, length, 32)
        with torch.no_grad():
            got = compiled(x, second)
        torch.testing.assert_close(got, fn(x, second), rtol=1e-5, atol=1e-5)
        if not generated:
            generated = _modules(tmp_path)
            assert generated, "the first size generated no module"
        else:
            assert _modules(tmp_path) == generated, f"a new module at {(batch, length)}"
    assert len(compiled.cache) == 1  # one symbolic entry, lowered per size


def test_a_reduce_overhead_compile_is_symbolic_on_the_cpu(caplog):
    # CUDA graphs record CUDA forwards only: on the CPU the mode changes nothing, and a
    # symbolic compile no longer refuses it
    compiled = rt.compile(scaled_gelu, dynamic=True, mode="reduce-overhead", codegen="eager")
    bias = torch.randn(32)
    with caplog.at_level(logging.INFO, logger="torchstrata.runtime"):
        for batch, length in BATCH_AND_LENGTH:
            x = torch.randn(batch, length, 32)
            torch.testing.assert_close(compiled(x, bias), scaled_gelu(x, bias))
    assert len(compiled.cache) == 1
    assert "with symbolic sizes" in caplog.text
    assert "static per shape" not in caplog.text
    assert "recording a CUDA graph" not in caplog.text


def _size_check(device: str) -> SizeCheck:
    """The size check of one [s, 4] input expected on ``device``."""
    sizes = SymbolicSizes({"L['x']": (0,)})
    with symbolic_scope(sizes):
        meta = input_meta("L['x']", torch.empty(5, 4))
    return SizeCheck(["L['x']"], [attrs.evolve(meta, device=torch.device(device))], sizes)


@pytest.mark.parametrize(("entry", "other"), [("cpu", "meta"), ("meta", "cpu")])
def test_the_size_check_never_passes_a_tensor_of_another_device(entry, other):
    # each order: the memo of a passing layout must not answer for the other device
    for first, second in ((entry, other), (other, entry)):
        check = _size_check(entry)
        assert check(torch.empty(7, 4, device=first)) is (first == entry)
        assert check(torch.empty(7, 4, device=second)) is (second == entry)
        assert check(torch.empty(7, 4, device=other)) is False
        assert f"device is {other}, expected {entry}" in check.last_failure
