"""Gradient hooks registered in compiled code train like eager (decision 0067): an MLP
whose hidden activation's gradient is scaled by a tensor hook and recorded by another,
and whose layers carry full backward hooks, through a few SGD steps."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import torchstrata.runtime as rt

RECORDED: list[torch.Tensor] = []
MODULE_LOG: list[torch.Tensor] = []


def record(grad: torch.Tensor) -> None:
    RECORDED.append(grad.clone())


def clip_input_grad(module, grad_input, grad_output):
    MODULE_LOG.append(grad_output[0].clone())
    return (grad_input[0].clamp(-0.01, 0.01),)


class HookedMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)
        self.fc2.register_full_backward_hook(clip_input_grad)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.fc1(x))
        hidden.register_hook(lambda g: g * 0.5)
        hidden.register_hook(record)
        return nn.functional.mse_loss(self.fc2(hidden), target)


def _train(model: nn.Module, run, batches) -> tuple[list, list, list]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, recorded, logged = [], [], []
    for x, target in batches:
        RECORDED.clear()
        MODULE_LOG.clear()
        optimizer.zero_grad()
        loss = run(x, target)
        assert RECORDED == [] and MODULE_LOG == []  # hooks run in the backward only
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        recorded += RECORDED
        logged += MODULE_LOG
    return losses, recorded, logged


def test_hooked_mlp_trains_like_eager(codegen):
    _check_training(codegen, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_hooked_mlp_trains_like_eager_on_the_gpu():
    _check_training(None, "cuda")  # generated Triton kernels, hook calls in the backward


def _check_training(codegen: str | None, device: str) -> None:
    torch.manual_seed(0)
    model = HookedMLP().to(device)
    eager = copy.deepcopy(model)
    batches = [
        (torch.randn(8, 16, device=device), torch.randn(8, 4, device=device)) for _ in range(3)
    ]
    want = _train(eager, eager, batches)
    compiled = rt.compile(model, codegen=codegen)
    got = _train(model, compiled, batches)
    # generated GPU kernels sum in another order than eager's (float32 throughout)
    tolerance = {} if device == "cpu" else {"rtol": 1e-4, "atol": 1e-5}
    for got_part, want_part in zip(got, want, strict=True):
        assert len(got_part) == len(want_part) == 3
        torch.testing.assert_close(got_part, want_part, **tolerance)
    for got_p, want_p in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(got_p, want_p, **tolerance)
    assert rt.explain(model, *batches[0]).graph_break_count == 0
