"""Floats computed from symbolic sizes (issue 33, decision 0500): an attention's scale
``1 / math.sqrt(q.shape[-1])``, ``q.size(-1) ** -0.5``, ``1.0 / n``, ``float(n) * 0.5``,
``d / t``. Through ``torch.compile(fn, backend="torchstrata", dynamic=True)`` and the
runtime's own capture (``dynamic=True``), such graphs lower once for many sizes (was:
Dynamo's graph per size, ``no symbolic trace (... a symbolic SymFloat ...)``; our capture
guarded the width ``Eq(L['q'].size()[2], 16)``): the generated code computes the float
from the size symbols at each call. Forward and training, C++ and Triton (interpreter on
the CPU; the ``gpu`` tests on CUDA), every call compared with eager."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as tsr

pytestmark = pytest.mark.usefixtures("dynamo_reset_no_fallback", "size_counts_no_fallback")

#: (rows, width) of each call: both change, the width alone too (no rows a multiple of 8:
#: a C++ training step's tiles take another lowering for those, decision 0382)
SIZES = ((5, 16), (7, 16), (9, 24), (11, 32), (6, 40), (13, 16), (10, 24))
CODEGENS = ["cpp", pytest.param("triton", marks=pytest.mark.triton)]

SCALES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "sqrt": lambda s, q: s / math.sqrt(q.shape[-1]),
    "power": lambda s, q: s * q.size(-1) ** -0.5,
    "reciprocal": lambda s, q: s * (1.0 / q.shape[-1]),
    "inverse_sqrt": lambda s, q: s * (1 / math.sqrt(q.shape[-1])),
    "half": lambda s, q: s * (float(q.shape[-1]) * 0.5),
    "ratio": lambda s, q: s * (q.shape[-1] / q.shape[1]),
}


def _scores(scale: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[..., Any]:
    def scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        s = scale(q @ k.transpose(-1, -2), q)
        return F.layer_norm(s, (s.shape[-1],), eps=1e-5).softmax(-1)

    return scores


def attention(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The issue's program: softmax of scaled scores, normalised."""
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return F.layer_norm(s.softmax(-1), (s.shape[-1],), eps=1e-5)


def _compiled(fn: Callable[..., Any], entry: str, codegen: str) -> Callable[..., Any]:
    if entry == "dynamo":
        return torch.compile(fn, backend="torchstrata", dynamic=True, options={"codegen": codegen})
    return tsr.compile(fn, dynamic=True, codegen=codegen)


def _inference(compiled: Callable[..., Any], fn: Callable[..., Any], device: str = "cpu") -> None:
    torch.manual_seed(0)
    for rows, width in SIZES:
        q, k = (torch.randn(2, rows, width, device=device) for _ in range(2))
        where = f"{rows, width}"
        torch.testing.assert_close(compiled(q, k), fn(q, k), msg=lambda m, w=where: f"{w}: {m}")


def _training(compiled: Callable[..., Any], fn: Callable[..., Any], device: str = "cpu") -> None:
    torch.manual_seed(0)
    for rows, width in SIZES:
        q, k = (torch.randn(2, rows, width, device=device, requires_grad=True) for _ in range(2))
        eager_q, eager_k = (t.detach().clone().requires_grad_() for t in (q, k))
        out, expected = compiled(q, k), fn(eager_q, eager_k)
        grad = torch.randn_like(out)
        out.backward(grad)
        expected.backward(grad)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close((q.grad, k.grad), (eager_q.grad, eager_k.grad))


def _lowered_for_many_sizes(calls: int) -> None:
    """Every call but the first few served by a lowering made for many sizes (one per
    bucket of the rows' length), none lowered on its own, nothing run eagerly."""
    stats = tsr.size_lowering_stats()
    assert set(stats) == {"symbolic", "reused"}, stats
    assert stats["symbolic"] <= 2 and stats["symbolic"] + stats["reused"] == calls, stats


@pytest.mark.parametrize("entry", ["dynamo", "capture"])
@pytest.mark.parametrize("codegen", CODEGENS)
def test_an_attention_scaled_by_the_square_root_of_its_width_lowers_once(entry, codegen):
    _inference(_compiled(attention, entry, codegen), attention)
    _lowered_for_many_sizes(len(SIZES))


@pytest.mark.parametrize("entry", ["dynamo", "capture"])
@pytest.mark.parametrize("codegen", CODEGENS)
def test_widths_at_one_length_share_one_lowering(entry, codegen):
    # the second case: Dynamo's symbol for the width feeds the square root
    compiled = _compiled(attention, entry, codegen)
    torch.manual_seed(0)
    widths = (16, 24, 32, 40, 56, 20, 64)
    for width in widths:
        q, k = torch.randn(2, 7, width), torch.randn(2, 7, width)
        torch.testing.assert_close(compiled(q, k), attention(q, k))
    # every width served by the first call's lowering (was: one lowering per width)
    stats = tsr.size_lowering_stats()
    assert stats == {"symbolic": 1, "reused": len(widths) - 1}, stats


@pytest.mark.parametrize("name", list(SCALES))
@pytest.mark.parametrize("entry", ["dynamo", "capture"])
def test_each_float_of_the_sizes_lowers_once(name, entry):
    fn = _scores(SCALES[name])
    _inference(_compiled(fn, entry, "cpp"), fn)
    _lowered_for_many_sizes(len(SIZES))


@pytest.mark.parametrize("entry", ["dynamo", "capture"])
@pytest.mark.parametrize("codegen", CODEGENS)
def test_a_training_graph_with_a_float_of_its_width_lowers_once(entry, codegen):
    _training(_compiled(attention, entry, codegen), attention)
    _lowered_for_many_sizes(len(SIZES))


def test_our_capture_keeps_the_width_symbolic():
    # ``math.sqrt(q.shape[-1])`` was specialised: the guard ``Eq(L['q'].size()[2], 16)``
    # and an entry per width
    compiled = tsr.compile(attention, dynamic=True)
    _inference(compiled, attention)
    q, k = torch.randn(2, 9, 24), torch.randn(2, 9, 24)
    guards = " ".join(guard.description for guard in tsr.explain(compiled, q, k).guards)
    assert "symbolic sizes" in guards and "L['q'].size()[2]," not in guards, guards
    assert "Eq(L['q'].size()[2], " not in guards and "sqrt" not in guards, guards


def test_a_float_of_sizes_passed_to_an_extern_call_is_computed_by_the_launcher():
    # ``scale=`` of scaled_dot_product_attention: an ATen call's argument, in Python
    def sdpa(q, k):
        return F.scaled_dot_product_attention(q, k, k, scale=q.size(-1) ** -0.5).relu()

    _inference(_compiled(sdpa, "dynamo", "cpp"), sdpa)
    stats = tsr.size_lowering_stats()
    assert stats.get("per_size", 0) == 0 and not any("fallback" in key for key in stats), stats


@pytest.mark.gpu
@pytest.mark.parametrize("entry", ["dynamo", "capture"])
def test_cuda_floats_of_sizes_forward_and_training(entry):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    _inference(_compiled(attention, entry, "triton"), attention, device="cuda")
    _lowered_for_many_sizes(len(SIZES))
    tsr.reset_size_lowering_stats()
    torch.compiler.reset()
    _training(_compiled(attention, entry, "triton"), attention, device="cuda")
    _lowered_for_many_sizes(len(SIZES))
