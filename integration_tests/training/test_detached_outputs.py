"""Outputs that are detached aliases of other outputs (or of inputs) keep eager's autograd.

``return loss, loss.detach()`` returns two tensors of one memory: the first requires grad
and backpropagates, the second does not. The compiled graph computes one value for both
(a detach is a no-op on functional values), and the runtime rebuilds the second as a view
of the first. Before, marking the second non-differentiable marked the first as well
(they were one tensor), so neither required grad: a silent wrong result.
"""

from __future__ import annotations

import pytest
import torch

import torchstrata.runtime as rt


class _Stores(torch.nn.Module):
    """A linear layer that keeps a detached copy of its output (as a forward hook would)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.stored: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x)
        self.stored = out.detach()
        return out


def _loss_and_detached(w, x):
    loss = (x @ w).sum()
    return loss, loss.detach()


def _detached_first(w, x):
    y = torch.tanh(x @ w)
    return y.detach(), y


def _detached_clone(w, x):
    y = x @ w
    return y, y.detach().clone()


def _view_and_detached(w, x):
    y = torch.sin(x @ w)
    return y.view(-1), y.detach()


def _detached_and_view(w, x):
    y = torch.sin(x @ w)
    return y.detach(), y.view(-1)


def _detached_input(w, x):
    return x @ w, w.detach()


def _detached_input_view(w, x):
    return w.detach()[0], (x @ w).sum()


def _no_grad_region(w, x):
    y = x @ w
    with torch.no_grad():
        z = y * 3
        d = y.detach()
    return z, y, d.view(-1)


def _data_of_output(w, x):
    y = torch.cos(x @ w)
    return y.data, y


CASES = [
    _loss_and_detached,
    _detached_first,
    _detached_clone,
    _view_and_detached,
    _detached_and_view,
    _detached_input,
    _detached_input_view,
    _no_grad_region,
    _data_of_output,
]


def _check_like_eager(got, want, params_ours, params_eager):
    assert len(got) == len(want)
    for ours, eager in zip(got, want, strict=True):
        assert ours.requires_grad == eager.requires_grad
        assert (ours.grad_fn is None) == (eager.grad_fn is None)
        torch.testing.assert_close(ours, eager)
    seeds = [torch.randn_like(eager) for eager in want]
    pairs = [(o, e, s) for o, e, s in zip(got, want, seeds, strict=True) if e.requires_grad]
    assert pairs, "every case has an output that requires grad"
    grads_ours = torch.autograd.grad(
        [o for o, _, _ in pairs], params_ours, [s for _, _, s in pairs], allow_unused=True
    )
    grads_eager = torch.autograd.grad(
        [e for _, e, _ in pairs], params_eager, [s for _, _, s in pairs], allow_unused=True
    )
    for ours, eager in zip(grads_ours, grads_eager, strict=True):
        torch.testing.assert_close(ours, eager)


@pytest.mark.parametrize("fn", CASES, ids=lambda fn: fn.__name__.strip("_"))
def test_detached_outputs_match_eager(fn, codegen):
    w = torch.randn(4, 3, requires_grad=True)
    x = torch.randn(2, 4)
    compiled = rt.compile(fn, codegen=codegen)
    for _ in range(2):  # the first call and a cached one
        _check_like_eager(compiled(w, x), fn(w, x), [w], [w])


def test_detached_output_shares_memory_like_eager(codegen):
    w = torch.randn(4, 3, requires_grad=True)
    x = torch.randn(2, 4)
    loss, copy = rt.compile(_loss_and_detached, codegen=codegen)(w, x)
    assert loss.requires_grad and not copy.requires_grad
    copy.add_(1)  # eager: the update shows in ``loss`` (one memory)
    torch.testing.assert_close(loss.detach(), copy)


class _Keeper:
    """A forward hook that keeps a detached copy of its module's output."""

    def __init__(self) -> None:
        self.kept: torch.Tensor | None = None

    def __call__(self, module, args, out):
        self.kept = out.detach()


def test_a_module_storing_a_detached_output(codegen):
    model = _Stores()
    reference = _Stores()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(2, 4)
    compiled = rt.compile(model, codegen=codegen)
    for _ in range(2):
        got, want = compiled(x), reference(x)
        assert got.requires_grad and got.grad_fn is not None
        assert model.stored is not None and reference.stored is not None
        assert not model.stored.requires_grad
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(model.stored, reference.stored)
        ours = torch.autograd.grad(got.sum(), list(model.parameters()))
        eager = torch.autograd.grad(want.sum(), list(reference.parameters()))
        for a, b in zip(ours, eager, strict=True):
            torch.testing.assert_close(a, b)


def test_a_submodule_hook_keeping_a_detached_output(codegen):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    reference = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    reference.load_state_dict(model.state_dict())
    ours_kept, eager_kept = _Keeper(), _Keeper()
    model[1].register_forward_hook(ours_kept)  # the output returned
    reference[1].register_forward_hook(eager_kept)
    x = torch.randn(2, 4)
    compiled = rt.compile(model, codegen=codegen)
    for _ in range(2):
        got, want = compiled(x), reference(x)
        assert got.requires_grad and got.grad_fn is not None
        assert ours_kept.kept is not None and eager_kept.kept is not None
        assert not ours_kept.kept.requires_grad
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(ours_kept.kept, eager_kept.kept)
        ours = torch.autograd.grad(got.sum(), list(model.parameters()))
        eager = torch.autograd.grad(want.sum(), list(reference.parameters()))
        for a, b in zip(ours, eager, strict=True):
            torch.testing.assert_close(a, b)
