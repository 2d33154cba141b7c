"""Forward hooks inlined around submodule calls (pre and post, with kwargs, results
replaced, global ones), and the guards that notice hooks added, removed or replaced."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.fc2(self.fc1(x).relu()) * scale


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x, scale=2.0) + 1


def _double(module, args, output):
    return output * 2


def _shift_input(module, args):
    return (args[0] + 1,)


def _single_input(module, args):
    return args[0] * 3  # not a tuple: it becomes the only argument


def _halve_scale(module, args, kwargs):
    return args, {**kwargs, "scale": kwargs["scale"] / 2}


def _add_scale(module, args, kwargs, output):
    return output + kwargs["scale"]


def _observe(module, args, output):
    return None  # results not replaced


HOOKS = {
    "post": lambda m: m.block.fc1.register_forward_hook(_double),
    "pre": lambda m: m.block.fc2.register_forward_pre_hook(_shift_input),
    "pre_single": lambda m: m.block.fc1.register_forward_pre_hook(_single_input),
    "pre_kwargs": lambda m: m.block.register_forward_pre_hook(_halve_scale, with_kwargs=True),
    "post_kwargs": lambda m: m.block.register_forward_hook(_add_scale, with_kwargs=True),
    "observe": lambda m: m.block.register_forward_hook(_observe),
    "two_in_order": lambda m: (
        m.block.fc1.register_forward_hook(_double),
        m.block.fc1.register_forward_hook(lambda mod, a, out: out - 1, prepend=True),
    ),
}


@pytest.mark.parametrize("kind", sorted(HOOKS))
def test_hooks_inlined_one_graph(kind, capture_only):
    torch.manual_seed(0)
    model = Outer()
    HOOKS[kind](model)
    reference = copy.deepcopy(model)
    runner = capture_only(model)
    for _ in range(2):
        x = torch.randn(3, 4)
        torch.testing.assert_close(runner(x), reference(x))
    assert runner.breaks == [] and runner.captures == 1


def test_hook_side_effects_replayed_and_no_break_through_runtime():
    runtime = pytest.importorskip("torchstrata.runtime")
    model = Outer()
    seen: list = []
    model.block.fc2.register_forward_hook(lambda mod, args, out: seen.append(out.detach()))
    x = torch.randn(3, 4)
    report = runtime.explain(model, x)
    assert report.graph_break_count == 0 and report.graph_count == 1
    seen.clear()
    out = runtime.compile(model, codegen="eager")(x)
    assert len(seen) == 1
    torch.testing.assert_close((seen[0] * 2.0) + 1, out)


def test_global_forward_hook_inlined(capture_only):
    model = Outer()
    handle = nn.modules.module.register_module_forward_hook(
        lambda mod, args, out: out * 0.5 if isinstance(mod, nn.Linear) else None
    )
    try:
        runner = capture_only(model)
        x = torch.randn(3, 4)
        torch.testing.assert_close(runner(x), model(x))
        assert runner.breaks == []
    finally:
        handle.remove()
    x = torch.randn(3, 4)
    torch.testing.assert_close(runner(x), model(x))  # the global hook's guard failed
    assert runner.captures == 2


def test_hooks_added_removed_replaced_fail_guards(capture_only):
    model = Outer()
    runner = capture_only(model)
    x = torch.randn(3, 4)
    runner(x)
    handle = model.block.fc1.register_forward_hook(_double)
    torch.testing.assert_close(runner(x), model(x))
    assert runner.captures == 2
    handle.remove()
    torch.testing.assert_close(runner(x), model(x))
    assert runner.captures == 2  # the first capture's guards hold again
    handle = model.block.fc1.register_forward_hook(_double)
    runner(x)  # a new hook id: its keys guard failed
    assert runner.captures == 3
    (hook_id,) = model.block.fc1._forward_hooks
    model.block.fc1._forward_hooks[hook_id] = _observe  # same key, another hook
    torch.testing.assert_close(runner(x), model(x))
    assert runner.captures == 4


def test_full_backward_hooks_are_inlined_old_style_ones_break(capture_only):
    model = Outer()
    model.block.register_full_backward_hook(lambda mod, gi, go: None)
    runner = capture_only(model)
    x = torch.randn(3, 4)
    torch.testing.assert_close(runner(x), model(x))
    assert runner.breaks == []  # decision 0067; gradients: test_grad_hooks.py
    old_style = Outer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        old_style.block.register_backward_hook(lambda mod, gi, go: None)
    runner = capture_only(old_style)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # eager's, on calling it
        torch.testing.assert_close(runner(x), old_style(x))
    assert any("register_backward_hook (not full)" in b.reason for b in runner.breaks)
