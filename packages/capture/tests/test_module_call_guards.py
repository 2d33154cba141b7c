"""The guards of a submodule call: each way of making ``module(x)`` run something other
than the traced ``forward`` after the capture fails one of them (the capture's checks,
through :func:`guard_failure`, as the runtime's generated check would)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from torchstrata.capture import capture, frame_locals, guard_failure


class Child(nn.Module):
    def forward(self, x):
        return x + 1


class OtherChild(Child):
    def forward(self, x):
        return x - 1


class Parent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = Child()
        self.second = Child()

    def forward(self, x):
        return self.second(self.first(x))


def _fails_after(change: Callable[[Parent], Any]) -> str | None:
    """Capture ``Parent``, apply ``change``: the source of the first guard that fails."""
    model = Parent()
    x = torch.randn(3)
    result = capture(model.forward, (x,), {})
    frame = frame_locals(model.forward, (x,), {})
    globals_ = type(model).forward.__globals__
    assert guard_failure(result.guards, frame, globals_) is None
    undo = change(model)
    try:
        failed = guard_failure(result.guards, frame, globals_)
    finally:
        if callable(undo):
            undo()
    return failed.source if failed is not None else None


def _hook(register: str) -> Callable[[Parent], Any]:
    def change(model: Parent) -> Any:
        return getattr(model.second, register)(lambda *args: None).remove

    return change


@pytest.mark.parametrize(
    "register",
    [
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_full_backward_hook",
        "register_full_backward_pre_hook",
    ],
)
def test_a_hook_on_the_second_instance_fails(register):
    """The second instance of a class has its own hook guards (only its ``forward`` is
    checked through the first)."""
    failed = _fails_after(_hook(register))
    assert failed is not None and "_modules['second']" in failed and "hooks" in failed


@pytest.mark.parametrize(
    "register",
    [
        "register_module_forward_hook",
        "register_module_forward_pre_hook",
        "register_module_full_backward_hook",
        "register_module_full_backward_pre_hook",
    ],
)
def test_a_global_hook_fails(register):
    def change(model: Parent) -> Any:
        return getattr(torch.nn.modules.module, register)(lambda *args: None).remove

    failed = _fails_after(change)
    assert failed is not None and failed.startswith("torch.nn.modules.module._global")


def test_forward_assigned_on_the_second_instance_fails():
    def change(model: Parent) -> Any:
        model.second.forward = lambda x: x * 5

    assert _fails_after(change) == "L['self']._modules['second'].__dict__"


def test_class_of_the_second_instance_reassigned_fails():
    def change(model: Parent) -> Any:
        model.second.__class__ = OtherChild

    assert _fails_after(change) == "L['self']._modules['second']"


def test_forward_replaced_on_the_class_fails():
    def change(model: Parent) -> Any:
        original = Child.forward
        Child.forward = OtherChild.forward  # type: ignore[method-assign]

        def undo() -> None:
            Child.forward = original  # type: ignore[method-assign]

        return undo

    assert _fails_after(change) == "L['self']._modules['first'].__class__.forward"


def test_forward_code_reassigned_fails():
    def change(model: Parent) -> Any:
        original = Child.forward.__code__
        Child.forward.__code__ = OtherChild.forward.__code__

        def undo() -> None:
            Child.forward.__code__ = original

        return undo

    assert _fails_after(change) == "L['self']._modules['first'].__class__.forward.__code__"


def test_one_forward_guard_per_class():
    model = Parent()
    result = capture(model.forward, (torch.randn(3),), {})
    forward_sources = [g.source for g in result.guards if g.source.endswith(".forward")]
    assert forward_sources == ["L['self']._modules['first'].__class__.forward"]
