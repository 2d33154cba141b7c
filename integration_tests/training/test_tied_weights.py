"""A tied embedding and head (``head.weight = embed.weight``) train as one weight: one graph
input, whose two gradient halves are summed in the backward graph (the embedding's half
scattered into the head's matmul result in place), not by the autograd engine."""

from __future__ import annotations

import torch
from torch import nn

import torchstrata.runtime as rt


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(64, 8)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 64, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, idx, targets):
        logits = self.head(self.norm(self.embed(idx)))
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _grads(model, fn, idx, targets):
    for p in model.parameters():
        p.grad = None
    loss = fn(idx, targets)
    loss.backward()
    return loss, {name: p.grad.clone() for name, p in model.named_parameters()}


def _check(model, compiled, idx, targets):
    want_loss, want = _grads(model, model, idx, targets)
    loss, got = _grads(model, compiled, idx, targets)
    torch.testing.assert_close(loss, want_loss)
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5)
    return loss


def test_the_tied_weight_gets_one_gradient_from_the_graph(codegen):
    model = TiedLM()
    compiled = rt.compile(model, codegen=codegen)
    idx = torch.tensor([[3, 9, 3, 0], [63, 9, 1, 1]])  # repeated rows accumulate
    targets = torch.tensor([[9, 3, 0, 63], [1, 2, 3, 3]])
    loss = _check(model, compiled, idx, targets)
    leaves = [fn for fn, _ in loss.grad_fn.next_functions if fn is not None]
    # embed.weight (= head.weight), norm.weight, norm.bias: one edge each
    assert len(leaves) == len(list(model.parameters())) == 3


def test_untying_recompiles_with_two_weights(codegen):
    model = TiedLM()
    compiled = rt.compile(model, codegen=codegen)
    idx = torch.tensor([[5, 6, 5]])
    targets = torch.tensor([[6, 5, 7]])
    _check(model, compiled, idx, targets)
    model.head.weight = nn.Parameter(torch.randn(64, 8))
    loss = _check(model, compiled, idx, targets)
    leaves = [fn for fn, _ in loss.grad_fn.next_functions if fn is not None]
    assert len(leaves) == len(list(model.parameters())) == 4
