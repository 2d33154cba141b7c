"""The gradients a compiled backward hands to ``AccumulateGrad`` (decision 0315): each has
its parameter's strides and is the very tensor the backward returned (stolen into
``param.grad``, not cloned into the parameter's layout), the tied weight gets one; step
after step, with gradients set to None or accumulated (``zero_grad(set_to_none=False)``),
the loss and every gradient stay eager's."""

from __future__ import annotations

import torch
from torch import nn

import torchstrata.runtime as rt

VOCAB, WIDTH, BATCH, TOKENS = 256, 16, 2, 8


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.norm = nn.LayerNorm(WIDTH)
        self.mix = nn.Linear(WIDTH, 3 * WIDTH)
        self.out = nn.Linear(3 * WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, idx, targets):
        x = self.embed(idx)
        x = x + self.out(nn.functional.gelu(self.mix(self.norm(x))))
        logits = self.head(x)
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


def test_gradients_are_the_backward_results_in_their_parameters_layout():
    model = TiedLM()
    compiled = rt.compile(model, codegen="cpp")
    compiled(*_batch(0)).backward()  # compile the forward and the backward
    returned: list[int] = []
    hooks = [p.register_hook(lambda g: returned.append(g.data_ptr())) for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    compiled(*_batch(1)).backward()
    for hook in hooks:
        hook.remove()
    assert len(returned) == len(list(model.parameters())) == 7  # one for the tied weight
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert p.grad.stride() == p.stride(), name
        assert p.grad.data_ptr() in returned, name  # stolen by AccumulateGrad, not cloned


def test_steps_set_to_none_and_accumulated_match_eager():
    model = TiedLM()
    compiled = rt.compile(model, codegen="cpp")
    batches = [_batch(seed) for seed in range(3)]
    for set_to_none in (True, False):
        want_losses, want_grads = _run(model, model, batches, set_to_none)
        losses, grads = _run(model, compiled, batches, set_to_none)
        for loss, want in zip(losses, want_losses, strict=True):
            torch.testing.assert_close(loss, want)
        for got, want in zip(grads, want_grads, strict=True):
            assert got.keys() == want.keys()
            for name in want:
                torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5)
