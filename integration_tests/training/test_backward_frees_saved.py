"""The backward frees what the forward saved as it goes (decision 0411).

The compiled backward takes the saved values in a list that it empties, autograd's
context lets go of them, and the launcher drops each at its last use: a GPT step's logits
(the largest saved value) are freed once the cross-entropy's gradient is computed, as
eager frees them, instead of living through the whole backward. Peak tensor memory is read
from the allocator's records (``torch.profiler`` memory events), exact and repeatable.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

import torchstrata.runtime as rt

from .models import GPTBlock


class TiedGPT(nn.Module):
    """Odd sizes (vocabulary 8191, 63 tokens; width 128 in 4 heads); the head's weight is
    the embedding's. At these sizes the step peaked above eager's (14.72 against 14.59 MB)
    while the logits lived through the backward; 10.53 MB since."""

    def __init__(self, vocab: int = 8191, dim: int = 128, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(64, dim) * 0.02)
        self.blocks = nn.ModuleList(GPTBlock(dim, 4) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _inputs(vocab: int = 8191) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, vocab, (2, 63)), torch.randint(0, vocab, (2, 63))


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _step_peak(model: nn.Module, fn, idx, targets) -> int:
    """The most bytes the step's tensors held at once (above those held before it)."""
    for p in model.parameters():
        p.grad = None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn(idx, targets).backward()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    held = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        held += event.nbytes()
        peak = max(peak, held)
    return peak


@pytest.fixture
def no_fallback():
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        yield


def test_a_tied_gpt_step_with_odd_sizes_matches_eager_and_peaks_no_higher(no_fallback):
    torch.manual_seed(0)
    model = TiedGPT()
    compiled = rt.compile(model, codegen="cpp")
    for _ in range(2):
        idx, targets = _inputs()
        for p in model.parameters():
            p.grad = None
        want_loss = model(idx, targets)
        want_loss.backward()
        want = _grads(model)
        for p in model.parameters():
            p.grad = None
        loss = compiled(idx, targets)
        loss.backward()
        torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-5)
        got = _grads(model)
        assert got.keys() == want.keys()
        for name in want:
            torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5)
    eager_peak = _step_peak(model, model, idx, targets)
    ours = _step_peak(model, compiled, idx, targets)
    # the logits (2 x 63 x 8191 floats, 4 MB) held through the backward were over
    assert ours <= eager_peak, (ours, eager_peak)


def test_a_backward_that_keeps_the_graph_keeps_the_saved_values(no_fallback):
    torch.manual_seed(0)
    model = TiedGPT(layers=1)
    compiled = rt.compile(model, codegen="cpp")
    idx, targets = _inputs()
    grads = []
    for fn in (model, compiled):
        for p in model.parameters():
            p.grad = None
        loss = fn(idx, targets)
        loss.backward(retain_graph=True)
        loss.backward()  # the saved values are read a second time: still there
        grads.append(_grads(model))
    want, got = grads
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5)
