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
from torchstrata.capture import graph_break
from torchstrata.runtime import TorchstrataFallbackWarning


def test_an_update_after_a_graph_break_shows_in_an_earlier_view():
    def f(a):
        z = a * 2
        row = z[0]
        graph_break()  # the update below runs in the next segment
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
        graph_break()  # flat and t cross it, z does not
        flat.add_(1)
        return t * 1

    a = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchstrataFallbackWarning)
        got = tsr.compile(f)(a)
    torch.testing.assert_close(got, f(a))


def _overlapping_slices(a):
    z = a * 2
    return z[0:3], z[2:5]


def _overlapping_columns(a):
    z = a.sin()
    return z[:, :3], z[:, 2:]


def _three_in_a_chain(a):
    z = a + 1
    return z[1:], z[:2], z[3:]


def _transposed_and_rows(a):
    z = a * 3
    return z.t()[1:], z[:2]


_OVERLAPPING = [_overlapping_slices, _overlapping_columns, _three_in_a_chain, _transposed_and_rows]


def _layout(tensor):
    return tuple(tensor.shape), tuple(tensor.stride()), tensor.storage_offset()


@pytest.mark.parametrize("f", _OVERLAPPING)
def test_overlapping_views_of_an_unreturned_intermediate_share_it(f):
    a = torch.randn(5, 4) if f is not _overlapping_slices else torch.randn(6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)  # compiled, not eager
        ours = tsr.compile(f)(a)
    eager = f(a)
    assert [_layout(t) for t in ours] == [_layout(t) for t in eager]
    assert ours[0]._base is not None
    assert all(t._base is ours[0]._base for t in ours)
    storages = {t.untyped_storage().data_ptr() for t in ours}
    assert len(storages) == 1
    for out in (ours, eager):
        out[0].add_(1)  # shows in the others, which overlap it
    for got, want in zip(ours, eager, strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("f", _OVERLAPPING)
def test_overlapping_views_of_an_unreturned_intermediate_get_eager_gradients(f):
    a = torch.randn(5, 4) if f is not _overlapping_slices else torch.randn(6)
    leaves = [a.clone().requires_grad_(), a.clone().requires_grad_()]
    results = []
    for fn, leaf in ((tsr.compile(f), leaves[0]), (f, leaves[1])):
        outs = fn(leaf)
        torch.manual_seed(0)
        weights = [torch.randn(out.shape) for out in outs]
        sum((out * w).sum() for out, w in zip(outs, weights, strict=True)).backward()
        results.append(outs)
    torch.testing.assert_close(leaves[0].grad, leaves[1].grad)
    ours, eager = results
    assert all(t._base is ours[0]._base for t in ours)
    for out in (ours, eager):
        with torch.no_grad():
            out[0].mul_(2)
    for got, want in zip(ours, eager, strict=True):
        torch.testing.assert_close(got, want)


def test_an_in_place_update_of_one_overlapping_view_reaches_the_others_gradient():
    leaves = [torch.randn(3, 5, requires_grad=True) for _ in range(2)]
    leaves[1] = leaves[0].detach().clone().requires_grad_()
    weight = torch.randn(3, 3)
    for fn, leaf in (
        (tsr.compile(_overlapping_columns), leaves[0]),
        (_overlapping_columns, leaves[1]),
    ):
        left, right = fn(leaf)
        left.mul_(2)  # column 2 of right doubles too, and its gradient with it
        (right * weight).sum().backward()
    torch.testing.assert_close(leaves[0].grad, leaves[1].grad)


def _views_across_a_break(a):
    z = a * 2
    first, second = z[0:3], z[2:5]
    del z
    graph_break()  # both views cross it, z does not
    first.add_(1)
    return second * 1


@pytest.mark.parametrize("training", [False, True])
def test_overlapping_views_cross_a_graph_break_and_see_an_update(training):
    a = torch.randn(6)
    assert tsr.explain(_views_across_a_break, a).graph_breaks
    leaves = [a.clone().requires_grad_(training) for _ in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchstrataFallbackWarning)
        got = tsr.compile(_views_across_a_break)(leaves[0])
    want = _views_across_a_break(leaves[1])
    torch.testing.assert_close(got, want)
    if training:
        weight = torch.randn(3)
        for out in (got, want):
            (out * weight).sum().backward()
        torch.testing.assert_close(leaves[0].grad, leaves[1].grad)


def test_overlapping_views_of_a_sparse_intermediate_run_eagerly():
    def f(a):
        z = torch.empty_strided((5,), (2,))  # not dense: it cannot be returned whole
        z.copy_(a)
        return z[0:3], z[2:5]

    a = torch.randn(5)
    with pytest.warns(TorchstrataFallbackWarning, match="overlap"):
        ours = tsr.compile(f)(a)
    eager = f(a)
    for out in (ours, eager):
        out[0].add_(1)
    for got, want in zip(ours, eager, strict=True):
        torch.testing.assert_close(got, want)


def test_views_that_do_not_overlap_stay_separate_outputs():
    def f(a):
        return (a * 2).chunk(2)

    a = torch.randn(4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        ours = tsr.compile(f)(a)
    for got, want in zip(ours, f(a), strict=True):
        torch.testing.assert_close(got, want)


def _detached_overlap(a):
    z = a.sin()
    return z[0:3], z[2:5].detach()


def _detached_view_of_returned(a):
    z = a.sin()
    return z, z.detach()[1]


@pytest.mark.parametrize("f", [_detached_overlap, _detached_view_of_returned])
def test_a_detached_view_gets_no_gradient(f):
    a = torch.randn(6) if f is _detached_overlap else torch.randn(3, 4)
    leaves = [a.clone().requires_grad_(), a.clone().requires_grad_()]
    results = [fn(leaf) for fn, leaf in zip((tsr.compile(f), f), leaves, strict=True)]
    for outs in results:
        (outs[0].sum() + (outs[1] * 3).sum()).backward()
    torch.testing.assert_close(leaves[0].grad, leaves[1].grad)
    ours, eager = results
    assert [t.requires_grad for t in ours] == [t.requires_grad for t in eager]
    assert ours[1].untyped_storage().data_ptr() == ours[0].untyped_storage().data_ptr()
