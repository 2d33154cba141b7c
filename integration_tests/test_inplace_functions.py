"""In-place torch functions (``torch.relu_(x)``, ``F.leaky_relu_(x)``) through the whole
compiler: the update shows in later reads and in the caller's tensor, as in eager.

Recorded by the capture as pure ops, these calls left the captured variable as it was.
Later reads inside a graph still saw the update (the ATen trace runs the real in-place
op), but ``torch.relu_(x); return x`` made no graph at all and returned ``x`` unchanged. In-place updates
of lists of tensors (``torch._foreach_add_``) break the graph and run eagerly; before,
they were dropped altogether."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as rt

UPDATES = {
    "torch.relu_": lambda t: torch.relu_(t),
    "torch.sigmoid_": lambda t: torch.sigmoid_(t),
    "torch.clamp_": lambda t: torch.clamp_(t, -0.5, 0.5),
    "torch.fill_": lambda t: torch.fill_(t, 2.0),
    "torch.index_put_": lambda t: torch.index_put_(t, (torch.tensor([0]),), torch.tensor(5.0)),
    "F.relu_": lambda t: F.relu_(t),
    "F.leaky_relu_": lambda t: F.leaky_relu_(t, 0.1),
    "F.elu_": lambda t: F.elu_(t),
    "F.hardtanh_": lambda t: F.hardtanh_(t),
    "F.threshold_": lambda t: F.threshold_(t, 0.5, 9.0),
}


@pytest.mark.parametrize("name", UPDATES)
def test_an_in_place_function_updates_an_input_and_later_reads(name):
    update = UPDATES[name]

    def fn(x):
        y = x * 2
        update(y)  # the returned value is ignored: only the update tells
        update(x)
        return y, x * 3, x

    x = torch.randn(4, 5)
    mine, theirs = x.clone(), x.clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # compiled, not run eagerly
        got = rt.compile(fn)(mine)
    want = fn(theirs)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(mine, theirs)
    assert got[2] is mine  # the argument itself, as eager returns it


@pytest.mark.parametrize("name", UPDATES)
def test_a_function_that_only_updates_its_input(name):
    update = UPDATES[name]

    def fn(x):
        update(x)
        return x

    x = torch.randn(4, 5)
    mine, theirs = x.clone(), x.clone()
    got = rt.compile(fn)(mine)
    assert got is mine
    torch.testing.assert_close(mine, fn(theirs))


def test_a_list_updated_in_place_is_a_graph_break():
    def fn(x):
        torch._foreach_add_([x], [x.flip(0)])
        return x * 2

    mine, theirs = torch.arange(6.0).reshape(3, 2), torch.arange(6.0).reshape(3, 2)
    report = rt.explain(fn, mine.clone())
    assert any("_foreach_add_" in brk.reason for brk in report.graph_breaks), str(report)
    got = rt.compile(fn)(mine)
    torch.testing.assert_close(got, fn(theirs))
    torch.testing.assert_close(mine, theirs)


def test_gradients_through_an_in_place_function_on_an_intermediate():
    def fn(x):
        y = x * 2
        F.leaky_relu_(y, 0.2)
        return (y * y).sum()

    x = torch.randn(4, 5, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_()
    rt.compile(fn)(x).backward()
    fn(x_eager).backward()
    torch.testing.assert_close(x.grad, x_eager.grad)
