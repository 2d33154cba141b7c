"""A graph that writes an input runs eagerly on a call where another input shares its
memory, also when that other input sits where the first call had a parameter (which
the check does not compare): the guards accept a plain tensor there."""

from __future__ import annotations

import warnings

import pytest
import torch

import torchstrata.runtime as tsr
from torchstrata.runtime import TorchstrataFallbackWarning, input_checks


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


class ScaleAndAdd(torch.nn.Module):
    """Writes its argument, then reads its parameter: in eager the parameter sees the
    write when the two share memory."""

    def __init__(self, weight: torch.Tensor, requires_grad: bool = True) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=requires_grad)

    def forward(self, x):
        x.mul_(2)
        return x + self.weight


@pytest.mark.parametrize("training", [False, True])
def test_a_parameter_made_from_a_written_argument_sees_the_write(training):
    def run(module_fn):
        buffer = torch.arange(4.0)
        module = ScaleAndAdd(buffer)  # the parameter shares the argument's memory
        with torch.set_grad_enabled(training):
            out = module_fn(module)(buffer)
        return out, buffer, module

    with pytest.warns(TorchstrataFallbackWarning, match="shares memory"):
        got, got_buffer, ours = run(tsr.compile)
    want, want_buffer, theirs = run(lambda module: module)
    torch.testing.assert_close(got, want)  # compiled alone gave 3 * buffer, eager 4 * buffer
    torch.testing.assert_close(got_buffer, want_buffer)
    if training:
        got.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(ours.weight.grad, theirs.weight.grad)


def test_a_weight_whose_data_was_set_to_the_written_argument_sees_the_write():
    torch.manual_seed(0)
    linear = torch.nn.Linear(4, 4, bias=False)
    eager_linear = torch.nn.Linear(4, 4, bias=False)

    def bump_and_project(x):
        x.add_(1)
        return linear(x)

    def eager_bump_and_project(x):
        x.add_(1)
        return eager_linear(x)

    compiled = tsr.compile(bump_and_project)
    with torch.no_grad():
        compiled(torch.randn(4, 4))  # compiled while the weight is its own tensor
        x = torch.randn(4, 4)
        eager_x = x.clone()
        linear.weight.data = x  # same shape, same guards: now the weight is the argument
        eager_linear.weight.data = eager_x
        with pytest.warns(TorchstrataFallbackWarning, match="shares memory"):
            got = compiled(x)
        want = eager_bump_and_project(eager_x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x, eager_x)


class BumpWeight(torch.nn.Module):
    """Writes its parameter, then reads its argument."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)

    def forward(self, x):
        self.weight.add_(1)
        return x * 2


def test_a_written_parameter_shows_in_an_argument_that_views_it():
    def run(module_fn):
        buffer = torch.arange(6.0)
        module = BumpWeight(buffer[:4])
        return module_fn(module)(buffer[2:]), buffer

    with pytest.warns(TorchstrataFallbackWarning, match="shares memory"):
        got, got_buffer = run(tsr.compile)
    want, want_buffer = run(lambda module: module)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_buffer, want_buffer)


def test_a_parameter_over_another_part_of_the_written_buffer_runs_compiled():
    buffer = torch.arange(8.0)
    module = ScaleAndAdd(buffer[4:], requires_grad=False)  # disjoint from the argument
    eager = ScaleAndAdd(buffer[4:].clone(), requires_grad=False)
    x, eager_x = buffer[:4], buffer[:4].clone()
    compiled = tsr.compile(module)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        got = compiled(x)
    torch.testing.assert_close(got, eager(eager_x))
    torch.testing.assert_close(x, eager_x)


class ScaleAndAddBuffer(torch.nn.Module):
    def __init__(self, shift: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("shift", shift)

    def forward(self, x):
        x.mul_(2)
        return x + self.shift


def test_a_buffer_that_views_a_written_argument_sees_the_write():
    def run(module_fn):
        buffer = torch.arange(6.0)
        return module_fn(ScaleAndAddBuffer(buffer[2:]))(buffer[:4]), buffer

    with torch.no_grad():
        with pytest.warns(TorchstrataFallbackWarning, match="shares memory"):
            got, got_buffer = run(tsr.compile)
        want, want_buffer = run(lambda module: module)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_buffer, want_buffer)


class CountedMLP(torch.nn.Module):
    """Writes a buffer of its own and reads forty parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(20))
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


@pytest.mark.parametrize("training", [False, True])
def test_the_parameters_are_not_looked_up_when_no_other_tensor_holds_a_written_input(
    training, monkeypatch
):
    checks, lookups = [], []
    compare, pick = input_checks.ComparedInputs.__call__, input_checks.ComparedInputs.parameters

    def counted_check(self, inputs):
        checks.append(len(inputs))
        return compare(self, inputs)

    def counted_lookup(self, inputs):
        lookups.append(1)
        return pick(self, inputs)

    monkeypatch.setattr(input_checks.ComparedInputs, "__call__", counted_check)
    monkeypatch.setattr(input_checks.ComparedInputs, "parameters", counted_lookup)
    torch.manual_seed(0)
    module = CountedMLP()
    compiled = tsr.compile(module)
    x = torch.randn(3, 8)
    with torch.set_grad_enabled(training), warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        for _ in range(3):
            got = compiled(x)
    assert len(checks) == 3 and min(checks) > 40  # every call checked: x, 40 weights, calls
    assert not lookups
    assert module.calls.item() == 3
    with torch.no_grad():
        module.calls.zero_()
        torch.testing.assert_close(got, module(x))
