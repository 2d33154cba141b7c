"""A backward whose cross-entropy gradient is a large scratch buffer kept between calls
(``inductor.launch.buffer_pool``, decision 0315): step after step, with gradients set to
None or accumulated, the loss and every gradient stay eager's, each ``param.grad`` has
its parameter's strides and is the tensor the compiled backward returned (no copy by
``AccumulateGrad``), and the tied weight gets one gradient."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import torchstrata.runtime as rt
from torchstrata.core import InductorOptions
from torchstrata.inductor.launch.buffer_pool import POOL_MIN_BYTES

VOCAB, WIDTH, BATCH, TOKENS = 2048, 16, 2, 64


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.norm = nn.LayerNorm(WIDTH)
        self.mix = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, idx, targets):
        logits = self.head(self.norm(torch.tanh(self.mix(self.embed(idx)))))
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randint(0, VOCAB, (BATCH, TOKENS), generator=g),
        torch.randint(0, VOCAB, (BATCH, TOKENS), generator=g),
    )


def _run(model, fn, batches, set_to_none: bool):
    """Losses and the gradients after each step of ``batches``."""
    model.zero_grad(set_to_none=True)
    losses, grads = [], []
    for idx, targets in batches:
        model.zero_grad(set_to_none=set_to_none)
        loss = fn(idx, targets)
        loss.backward()
        losses.append(loss.detach())
        grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
    return losses, grads


def _backward_launchers(debug_dir: Path) -> list[str]:
    return [path.read_text() for path in debug_dir.glob("*backward*/*launcher.py")]


def test_steps_with_a_pooled_gradient_buffer_match_eager(tmp_path):
    assert BATCH * TOKENS * VOCAB * 4 >= POOL_MIN_BYTES  # the logits' gradient is pooled
    model = TiedLM()
    compiled = rt.compile(model, codegen="cpp", options={"debug_dir": str(tmp_path)})
    batches = [_batch(seed) for seed in range(3)]
    for set_to_none in (True, False):
        want_losses, want_grads = _run(model, model, batches, set_to_none)
        losses, grads = _run(model, compiled, batches, set_to_none)
        for loss, want in zip(losses, want_losses, strict=True):
            torch.testing.assert_close(loss, want)
        for got, want in zip(grads, want_grads, strict=True):
            assert got.keys() == want.keys() == {"embed.weight", "norm.weight", "norm.bias",
                                                 "mix.weight", "mix.bias"}
            for name in want:
                torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5)
    assert any("= _take(_pool" in text for text in _backward_launchers(tmp_path))


def test_gradients_are_the_backward_results_in_their_parameters_layout():
    model = TiedLM()
    compiled = rt.compile(model, codegen="cpp")
    returned: list[int] = []
    hooks = [p.register_hook(lambda g: returned.append(g.data_ptr())) for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    compiled(*_batch(0)).backward()
    for hook in hooks:
        hook.remove()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert p.grad.stride() == p.stride(), name
        assert p.grad.data_ptr() in returned, name  # stolen by AccumulateGrad, not cloned


def test_the_switch_off_gives_the_same_gradients():
    model = TiedLM()
    pooled = rt.compile(model, codegen="cpp")
    plain = rt.compile(model, codegen="cpp", options={"inductor": InductorOptions(buffer_pool=False)})
    batches = [_batch(seed) for seed in range(2)]
    _, want = _run(model, plain, batches, True)
    _, got = _run(model, pooled, batches, True)
    for a, b in zip(got, want, strict=True):
        for name in b:
            torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)
