"""Gradient hooks in traced code without a graph break (decision 0067): a tensor's
``register_hook`` and a module's full backward hooks run in the backward, on eager's
gradients, their results replacing them; guards capture again when hooks change."""

from __future__ import annotations

import copy
import functools
import warnings

import pytest
import torch
from torch import nn

from torchstrata.capture import capture
from torchstrata.core import interpret

RECORDED: list[torch.Tensor] = []


def record(grad: torch.Tensor) -> None:
    RECORDED.append(grad.clone())


def scales_and_records(w, x):
    y = w * x
    y.register_hook(lambda g: g * 3)  # replaces the gradient
    z = y.sin()
    z.register_hook(record)  # returns None: the gradient stays
    return (z * y).sum()


def _captured(fn, *args):
    result = capture(fn, args, {})
    assert result.graph_breaks == (), result.graph_breaks
    runners = [functools.partial(interpret, graph) for graph in result.graphs]
    return lambda *call: result.program(runners, call, {})


def _grads(fn, w, x, tangent=None):
    """(w's gradient, the gradients recorded, what was recorded before the backward)."""
    RECORDED.clear()
    w.grad = None
    out = fn(w, x)
    before = list(RECORDED)
    out.backward(tangent)
    return w.grad.clone(), list(RECORDED), before


@pytest.mark.parametrize("tangent", [None, torch.tensor(2.5)])
def test_tensor_hooks_scale_and_record_like_eager(tangent):
    w = torch.randn(5, requires_grad=True)
    x = torch.randn(5)
    want, want_recorded, _ = _grads(scales_and_records, w, x, tangent)
    got, recorded, before = _grads(_captured(scales_and_records, w, x), w, x, tangent)
    torch.testing.assert_close(got, want)
    assert before == []  # the hook runs in the backward, not the forward
    assert len(recorded) == len(want_recorded) == 1
    torch.testing.assert_close(recorded[0], want_recorded[0])


def test_tensor_hooks_through_the_runtime_train_like_eager():
    runtime = pytest.importorskip("torchstrata.runtime")
    w = torch.randn(6, requires_grad=True)
    compiled = runtime.compile(scales_and_records, codegen="eager")
    for step in range(3):
        x = torch.randn(6)
        tangent = torch.tensor(1.0 + step)  # a tangent other than 1 too
        want, want_recorded, _ = _grads(scales_and_records, w, x, tangent)
        with warnings.catch_warnings():
            warnings.simplefilter("error", runtime.TorchstrataFallbackWarning)
            got, recorded, before = _grads(compiled, w, x, tangent)
        torch.testing.assert_close(got, want)
        assert before == [] and len(recorded) == 1
        torch.testing.assert_close(recorded[0], want_recorded[0])
    assert runtime.explain(scales_and_records, w, torch.randn(6)).graph_break_count == 0


def hooks_an_input(w, x):
    w.register_hook(record)
    return (w * x).sum()


def test_a_hook_on_an_input_is_registered_on_the_real_tensor_every_call():
    w = torch.randn(3, requires_grad=True)
    x = torch.randn(3)
    run = _captured(hooks_an_input, w, x)
    _, recorded, before = _grads(run, w, x)
    assert before == [] and len(recorded) == 1
    torch.testing.assert_close(recorded[0], x)
    _, recorded, _ = _grads(run, w, x)  # registered again: eager's hooks pile up too
    assert len(recorded) == 2 and len(w._backward_hooks) == 2


def hook_after_use(w, x):
    y = w * x
    z = y + 1
    y.register_hook(record)
    return (z * y).sum()


def hook_on_a_tensor_without_grad(x):
    y = x * 2
    y.register_hook(record)
    return y


@pytest.mark.parametrize(
    ("fn", "args", "reason"),
    [
        (hook_after_use, (torch.ones(2, requires_grad=True), torch.ones(2)), "already used"),
        (hook_on_a_tensor_without_grad, (torch.ones(2),), "does not require grad"),
    ],
)
def test_hooks_capture_cannot_place_are_breaks_with_a_reason(fn, args, reason):
    result = capture(fn, args, {})
    assert result.graph_breaks and reason in result.graph_breaks[0].reason


LOG: list = []


def full_hook(module, grad_input, grad_output):
    LOG.append(("full", [g if g is None else g.clone() for g in grad_input], grad_output[0]))
    return None if grad_input[0] is None else (grad_input[0] * 2,)


def pre_hook(module, grad_output):
    LOG.append(("pre", grad_output[0].clone()))
    return (grad_output[0] * 0.5,)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 2)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))).sum()


def _same_log(got: list, want: list) -> None:
    def flat(log: list) -> list:
        items: list = []
        for entry in log:
            for item in entry:
                items.extend(item if isinstance(item, list) else [item])
        return items

    assert [entry[0] for entry in got] == [entry[0] for entry in want]
    for a, b in zip(flat(got), flat(want), strict=True):
        if isinstance(b, torch.Tensor):
            torch.testing.assert_close(a, b)
        else:
            assert a == b


def _step(net, x):
    LOG.clear()
    for p in net.parameters():
        p.grad = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # eager's no-input-grad warning
        net(x).backward()
    return [p.grad.clone() for p in net.parameters()], list(LOG)


def test_module_full_backward_hooks_like_eager_and_recaptured_when_changed():
    runtime = pytest.importorskip("torchstrata.runtime")
    torch.manual_seed(0)
    net = Net()
    net.b.register_full_backward_hook(full_hook)
    net.b.register_full_backward_pre_hook(pre_hook)
    handle = net.a.register_full_backward_hook(full_hook)  # its input needs no grad
    compiled = runtime.compile(net, codegen="eager")
    x = torch.randn(3, 4)
    for change in ("none", "remove", "add"):
        if change == "remove":
            handle.remove()
        elif change == "add":
            net.b.register_full_backward_hook(full_hook)
        eager = copy.deepcopy(net)
        want, want_log = _step(eager, x)
        with warnings.catch_warnings():
            warnings.simplefilter("error", runtime.TorchstrataFallbackWarning)
            got, log = _step(compiled, x)
        torch.testing.assert_close(got, want)
        _same_log(log, want_log)
    assert runtime.explain(net, x).graph_break_count == 0


def test_module_backward_hooks_in_the_reference_interpreter():
    torch.manual_seed(1)
    net = Net()
    net.b.register_full_backward_hook(full_hook)
    net.b.register_full_backward_pre_hook(pre_hook)
    x = torch.randn(2, 4, requires_grad=True)
    eager = copy.deepcopy(net)
    run = _captured(net, x)
    LOG.clear()
    run(x).backward()
    log = list(LOG)
    LOG.clear()
    eager(x).backward()
    _same_log(log, LOG)
    for got, want in zip(net.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad)


class TwoInOut(nn.Module):
    def forward(self, x, y, mask):
        return x * y, (x + y) * mask, mask


def swap_hook(module, grad_input, grad_output):
    LOG.append(("full", [g if g is None else g.clone() for g in grad_input], *grad_output))
    return (grad_input[1] * 2, grad_input[0], None)


def pre_scale(module, grad_output):
    LOG.append(("pre", *grad_output))
    return (grad_output[0] * 3, grad_output[1], grad_output[2])


class UsesTwo(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = TwoInOut()

    def forward(self, x, y, mask):
        product, total, _ = self.inner(x, y, mask)
        return (product * total).sum()


def test_module_hooks_on_several_tensors_and_a_tuple_output_like_eager():
    model = UsesTwo()
    model.inner.register_full_backward_hook(swap_hook)
    model.inner.register_full_backward_pre_hook(pre_scale)
    x = torch.randn(3, requires_grad=True)
    y = torch.randn(3, requires_grad=True)
    mask = torch.rand(3)
    run = _captured(model, x, y, mask)
    LOG.clear()
    run(x, y, mask).backward()
    log, grads = list(LOG), (x.grad.clone(), y.grad.clone())
    LOG.clear()
    x.grad = y.grad = None
    model(x, y, mask).backward()
    _same_log(log, LOG)
    torch.testing.assert_close(grads, (x.grad, y.grad))


class Masked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, mask, scale):
        return self.fc(x) * mask * scale


class UsesMasked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Masked()

    def forward(self, x, mask):
        return self.inner(x, mask, 2.0).sum()


def masked_hook(module, grad_input, grad_output):
    LOG.append(("full", [g if g is None else g.clone() for g in grad_input], grad_output[0]))
    return (grad_input[0] * 3, None, None)


def test_a_mask_argument_gets_zeros_in_grad_input_like_eager():
    torch.manual_seed(2)
    model = UsesMasked()
    model.inner.register_full_backward_hook(masked_hook)
    x = torch.randn(3, 4, requires_grad=True)
    mask = (torch.rand(3, 4) > 0.5).float()
    eager = copy.deepcopy(model)
    run = _captured(model, x, mask)
    LOG.clear()
    run(x, mask).backward()
    log, grad = list(LOG), x.grad.clone()
    LOG.clear()
    x.grad = None
    eager(x, mask).backward()
    _same_log(log, LOG)
    assert [g is None for g in log[0][1]] == [False, False, True]  # the mask: zeros
    torch.testing.assert_close(grad, x.grad)


class SavesGrad(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.saved: list[torch.Tensor] = []

    def save_grad(self, grad: torch.Tensor) -> torch.Tensor:
        self.saved.append(grad.clone())
        return grad * 2

    def forward(self, x):
        hidden = self.fc(x)
        hidden.register_hook(self.save_grad)
        return hidden.tanh().sum()


def test_a_method_of_the_module_as_a_hook():
    torch.manual_seed(3)
    model = SavesGrad()
    eager = copy.deepcopy(model)
    x = torch.randn(2, 3)
    run = _captured(model, x)
    run(x).backward()
    eager(x).backward()
    assert len(model.saved) == len(eager.saved) == 1
    torch.testing.assert_close(model.saved[0], eager.saved[0])
    torch.testing.assert_close(model.fc.weight.grad, eager.fc.weight.grad)
