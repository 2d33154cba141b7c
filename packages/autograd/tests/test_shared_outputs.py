"""User outputs that overlap in an unreturned intermediate: one hidden base output."""

from __future__ import annotations

import operator

import pytest
import torch

from torchstrata.autograd import aot as aot_graphs
from torchstrata.autograd import aot_forward
from torchstrata.core import GraphBuilder, Level, TensorMeta, interpret


def _two_overlapping_slices(helpers, requires_grad=False):
    """``z = x * 2; return z[0:3], z[2:5]`` as a torch-level graph."""
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta((6,), torch.float32, requires_grad=requires_grad))
    z = helpers.call(b, operator.mul, x, 2.0)
    first = helpers.call(b, operator.getitem, z, slice(0, 3))
    second = helpers.call(b, operator.getitem, z, slice(2, 5))
    return b.build([first, second])


def _views(outputs, result):
    """The user outputs rebuilt as the runtime does: views of their owners."""
    user = list(outputs[: result.num_user_outputs])
    for position, view in enumerate(result.output_views):
        if view is not None:
            owner, size, stride, offset = view
            base = user[owner]
            user[position] = base.as_strided(size, stride, base.storage_offset() + offset)
    return user[: result.num_user_outputs - result.num_hidden_outputs]


def test_overlapping_slices_become_views_of_a_hidden_base(aot):
    result = aot_forward(_two_overlapping_slices(aot))
    assert (result.num_user_outputs, result.num_hidden_outputs) == (3, 1)
    assert result.output_views == ((2, (3,), (1,), 0), (2, (3,), (1,), 2), None)
    assert result.output_aliases == (None, None, None)
    x = torch.randn(6)
    first, second = _views(interpret(result.forward, x), result)
    torch.testing.assert_close(first, x[0:3] * 2)
    torch.testing.assert_close(second, x[2:5] * 2)
    first.add_(1)
    torch.testing.assert_close(second[0], x[2] * 2 + 1)


def test_a_hidden_base_gets_a_tangent_in_training(aot):
    result = aot_graphs(_two_overlapping_slices(aot, requires_grad=True))
    assert result.num_hidden_outputs == 1
    assert result.tangent_outputs == (0, 1, 2)
    x = torch.randn(6)
    outputs = interpret(result.forward, x)
    saved = outputs[3 : 3 + result.num_saved]
    tangent = torch.randn(6)
    zeros = torch.zeros(3)
    (grad,) = interpret(result.backward, *saved, zeros, zeros, tangent)
    torch.testing.assert_close(grad, tangent * 2)  # the hidden base carries the gradient


@pytest.mark.parametrize("start", [3, 4])
def test_outputs_that_do_not_overlap_get_no_hidden_base(aot, start):
    b, (x,) = aot.builder(x=((6,), torch.float32))
    z = aot.call(b, operator.mul, x, 2.0)
    first = aot.call(b, operator.getitem, z, slice(0, 3))
    second = aot.call(b, operator.getitem, z, slice(start, 6))
    result = aot_forward(b.build([first, second]))
    assert result.num_hidden_outputs == 0
    assert result.output_views == (None, None)


def test_an_owner_that_covers_the_overlapping_outputs_needs_no_hidden_base(aot):
    b, (x,) = aot.builder(x=((6,), torch.float32))
    z = aot.call(b, operator.mul, x, 2.0)
    whole = aot.call(b, operator.getitem, z, slice(0, 5))
    first = aot.call(b, operator.getitem, z, slice(0, 3))
    second = aot.call(b, operator.getitem, z, slice(2, 5))
    result = aot_forward(b.build([first, whole, second]))
    assert result.num_hidden_outputs == 0
    assert result.output_views == ((1, (3,), (1,), 0), None, (1, (3,), (1,), 2))


@pytest.mark.parametrize("detached_first", [False, True])
def test_a_detached_alias_never_owns_an_output_that_requires_grad(aot, detached_first):
    """``y.detach()`` beside ``y``: ``y`` (which requires grad) owns the detached alias,
    whatever the order, so the caller never rebuilds ``y`` from a tensor with no history."""
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta((2, 3), torch.float32, requires_grad=True))
    y = aot.call(b, torch.sin, x)
    detached = aot.call(b, torch.Tensor.detach, y)
    outputs = [detached, y] if detached_first else [y, detached]
    result = aot_graphs(b.build(outputs))
    grad_position = 1 if detached_first else 0
    assert result.tangent_outputs == (grad_position,)
    assert result.output_views[grad_position] is None
    assert result.output_views[1 - grad_position] == (grad_position, (2, 3), (3, 1), 0)
