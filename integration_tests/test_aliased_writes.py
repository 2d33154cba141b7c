"""A graph that writes an input runs eagerly on a call where another input shares its
memory, also when that other input sits where the first call had a parameter (which
the check does not compare): the guards accept a plain tensor there."""

from __future__ import annotations

import warnings

import pytest
import torch

import torchstrata.runtime as tsr
from torchstrata.runtime import TorchstrataFallbackWarning


def bump_and_scale(x, w):
    x.add_(1)
    return x * w


@pytest.mark.parametrize("training", [False, True])
def test_a_plain_tensor_where_a_parameter_was_that_aliases_a_written_input(training):
    compiled = tsr.compile(bump_and_scale)
    with torch.set_grad_enabled(training):
        compiled(torch.randn(4), torch.nn.Parameter(torch.randn(4)))  # w: a parameter
        buffer = torch.randn(4)
        ours_x, eager_x = buffer.clone(), buffer.clone()
        ours_w, eager_w = (x.detach().requires_grad_() for x in (ours_x, eager_x))
        with pytest.warns(TorchstrataFallbackWarning, match="shares memory"):
            got = compiled(ours_x, ours_w)  # w: a plain tensor over x's memory
        want = bump_and_scale(eager_x, eager_w)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(ours_x, eager_x)
    if training:
        got.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(ours_w.grad, eager_w.grad)


def test_a_plain_tensor_where_a_parameter_was_that_aliases_nothing_runs_compiled():
    compiled = tsr.compile(bump_and_scale)
    with torch.no_grad():
        compiled(torch.randn(4), torch.nn.Parameter(torch.randn(4)))
        x, w = torch.randn(4), torch.randn(4).requires_grad_()
        want = bump_and_scale(x.clone(), w)
        with warnings.catch_warnings():
            warnings.simplefilter("error", TorchstrataFallbackWarning)
            got = compiled(x, w)
    torch.testing.assert_close(got, want)
