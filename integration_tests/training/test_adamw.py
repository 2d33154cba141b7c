"""A 20-step AdamW run: the compiled loss follows eager's loss curve and parameters."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import torchstrata.runtime as rt

from .models import MLP, twin

STEPS = 20


def _train(model, loss_of, x, target):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(x, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float64)


def test_adamw_loss_curve_matches_eager(codegen):
    model = MLP()  # float32, the shapes of the other MLP tests (their kernels are cached)
    eager_model = twin(model)
    x = torch.randn(8, 16)
    target = torch.randint(0, 8, (8,))
    target[::3] = -1  # some ignored rows

    def loss_of(x, target):
        return F.cross_entropy(model(x), target, ignore_index=-1)

    def eager_loss_of(x, target):
        return F.cross_entropy(eager_model(x), target, ignore_index=-1)

    compiled = rt.compile(loss_of, codegen=codegen)
    ours = _train(model, compiled, x, target)
    eager = _train(eager_model, eager_loss_of, x, target)
    assert ours[-1] < 0.5 * ours[0]  # it trains
    torch.testing.assert_close(ours, eager, rtol=1e-4, atol=0)
    for p, q in zip(model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)
    report = rt.explain(compiled, x, target)
    assert report.graph_count == 1 and report.graph_break_count == 0
