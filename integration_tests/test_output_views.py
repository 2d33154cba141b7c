"""Outputs that view one another, and in-place view ops, through the whole compiler.

A function that returns an intermediate and a view of it gets two tensors that share
memory, as in eager: an in-place update of one shows in the other. Before, the view came
back as a separate tensor, which gave a silent wrong result once a graph break put the
update in the next segment. ``squeeze_``/``unsqueeze_``/``t_`` on intermediates are
traced (``F.linear`` on a 1-D input calls ``squeeze_``)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as tsr
from torchstrata.runtime import TorchstrataFallbackWarning


def test_an_update_after_a_graph_break_shows_in_an_earlier_view():
    def f(a):
        z = a * 2
        row = z[0]
        print(end="")  # a graph break: the update below runs in the next segment
        z.mul_(3)
        return z + 1, row * 1

    a = torch.randn(3, 4)
    for got, want in zip(tsr.compile(f)(a), f(a), strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("training", [False, True])
def test_a_write_to_an_input_that_another_input_views_runs_eagerly(training):
    def f(x, y, w):
        x.mul_(2)
        return y * w, x + 1

    compiled = tsr.compile(f)
    w = torch.randn(4, requires_grad=training)
    plain = [torch.randn(3, 4), torch.randn(4)]
    ours = compiled(*[t.clone() for t in plain], w)  # no aliasing: compiled code
    for got, want in zip(ours, f(*[t.clone() for t in plain], w), strict=True):
        torch.testing.assert_close(got, want)
    base = torch.randn(3, 4)
    ours_x, eager_x = base.clone(), base.clone()
    with pytest.warns(TorchstrataFallbackWarning, match="shares memory"):
        got = compiled(ours_x, ours_x[0], w)
    want = f(eager_x, eager_x[0], w)
    for ours, eager in zip(got, want, strict=True):
        torch.testing.assert_close(ours, eager)
    torch.testing.assert_close(ours_x, eager_x)
    if training:
        (grad,) = torch.autograd.grad(got[0].sum(), w)
        torch.testing.assert_close(grad, eager_x[0])


def test_in_place_view_ops_between_graph_breaks():
    def f(a):
        z = a * 2
        row = z[0]
        z.unsqueeze_(0)
        z.mul_(3)
        z.squeeze_(0)
        z.t_()
        return z + 1, row * 1

    a = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchstrataFallbackWarning)
        got = tsr.compile(f)(a)
    for ours, eager in zip(got, f(a), strict=True):
        torch.testing.assert_close(ours, eager)


def _owner_returned(a):
    z = a * 2
    return z, z[1], z.t()


def _owner_not_returned(a):
    z = a * 2
    return z.view(-1), z.t()


@pytest.mark.parametrize("f", [_owner_returned, _owner_not_returned])
def test_returned_views_share_memory(f):
    a = torch.randn(3, 4)
    ours, eager = tsr.compile(f)(a), f(a)
    for out in (ours, eager):
        out[0].add_(1)
    for got, want in zip(ours, eager, strict=True):
        torch.testing.assert_close(got, want)
    assert ours[1].untyped_storage().data_ptr() == ours[0].untyped_storage().data_ptr()


def test_views_of_an_output_get_gradients_through_their_owner():
    def f(a):
        z = a.sin()
        return z, z.t()

    a = torch.randn(3, 4, requires_grad=True)
    b = a.detach().clone().requires_grad_()
    weight = torch.randn(4, 3)
    for fn, x in ((tsr.compile(f), a), (f, b)):
        z, zt = fn(x)
        (z.sum() + (zt * weight).sum()).backward()
    torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_linear_compiles_without_falling_back(shape):
    x, w, bias = torch.randn(shape), torch.randn(4, 3), torch.randn(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        got = tsr.compile(linear)(x, w, bias)
    torch.testing.assert_close(got, linear(x, w, bias))


def linear(x, w, bias):
    return F.linear(x, w, bias)


def test_a_graph_break_between_two_views_and_an_update():
    def f(a):
        z = a * 2
        flat, t = z.view(-1), z.t()
        del z
        print(end="")  # a graph break: flat and t cross it, z does not
        flat.add_(1)
        return t * 1

    a = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchstrataFallbackWarning)
        got = tsr.compile(f)(a)
    torch.testing.assert_close(got, f(a))
