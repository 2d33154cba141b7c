"""With static tensor guards checked natively (decision 0460), every change the compiled
code depends on still fails the entry's positional check, and the compiled module then
gives eager's results: an input's dtype, shape, strides, device or ``requires_grad``, a
parameter replaced by one of another layout, ``.data`` assigned, a buffer resized in
place, ``train()``, grad mode, autocast and a global read by the function. A parameter
replaced by one of the same layout, or updated in place, keeps the entry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import torchstrata.runtime as rt
from torchstrata.runtime.native_guards import tensor_checks


class Block(torch.nn.Module):
    """A convolution, a batch norm and a ReLU, as in a ResNet stem."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def _holds(function: Any, args: tuple[Any, ...], grad: bool = False) -> bool:
    """Whether the first entry's positional check holds for ``args`` now, in grad mode
    ``grad`` (the module's entries are compiled under ``no_grad``)."""
    with torch.set_grad_enabled(grad):
        return _check_holds(function, args)


def _check_holds(function: Any, args: tuple[Any, ...]) -> bool:
    guards = function.cache.entries[0].guards
    check = guards.fetch_args or guards.check_args
    assert check is not None
    result = check(args, function._globals)
    return (result is not None and not isinstance(result, int)) or result == -1


def _compiled_block() -> tuple[Block, rt.CompiledModule, torch.Tensor]:
    torch.manual_seed(0)
    block = Block().eval()
    compiled = rt.compile(block, codegen="eager", dynamic=False)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), block(x))
    guards = compiled.compiled_forward.cache.entries[0].guards
    if tensor_checks(True) is not None:
        assert guards.native_count == 7  # the input, the weight, the batch norm's four, the state
    return block, compiled, x


def _replace_weight(block: Block) -> None:
    block.conv.weight = torch.nn.Parameter(
        torch.randn(4, 3, 3, 3).contiguous(memory_format=torch.channels_last)
    )


def _assign_data(block: Block) -> None:
    block.conv.weight.data = torch.randn(4, 3, 3, 3).contiguous(memory_format=torch.channels_last)


def _resize_buffer(block: Block) -> None:
    block.bn.running_mean.resize_(2)


def _train(block: Block) -> None:
    block.train()


def _frozen(block: Block) -> None:
    block.conv.weight.requires_grad_(False)


MODULE_CHANGES: dict[str, Callable[[Block], None]] = {
    "parameter replaced": _replace_weight,
    "data assigned": _assign_data,
    "buffer resized": _resize_buffer,
    "train": _train,
    "requires_grad of a parameter": _frozen,
}


@pytest.mark.parametrize("change", list(MODULE_CHANGES))
def test_a_changed_module_fails_the_entry(change):
    block, compiled, x = _compiled_block()
    function = compiled.compiled_forward
    assert _holds(function, (x,))
    MODULE_CHANGES[change](block)
    assert not _holds(function, (x,))
    if change != "buffer resized":  # eager itself refuses a batch norm's short mean
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), block(x))


INPUT_CHANGES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "dtype": lambda x: x.double(),
    "shape": lambda x: x[:1],
    "strides": lambda x: x.contiguous(memory_format=torch.channels_last),
    "device": lambda x: x.to("meta"),
    "requires_grad": lambda x: x.clone().requires_grad_(),
    "negative bit": torch._neg_view,
}


@pytest.mark.filterwarnings("ignore:torchstrata. graph break")  # a negative bit runs eagerly
@pytest.mark.parametrize("change", list(INPUT_CHANGES))
def test_a_changed_input_fails_the_entry(change):
    block, compiled, x = _compiled_block()
    y = INPUT_CHANGES[change](x)
    assert not _holds(compiled.compiled_forward, (y,))
    if change == "dtype":
        block.double()
    if change != "device":
        with torch.no_grad():
            torch.testing.assert_close(compiled(y), block(y))


def test_global_state_changes_fail_the_entry():
    _, compiled, x = _compiled_block()
    function = compiled.compiled_forward
    assert _holds(function, (x,)) and not _holds(function, (x,), grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not _holds(function, (x,))
    assert _holds(function, (x,))


def test_same_layout_replacements_keep_the_entry():
    block, compiled, x = _compiled_block()
    function = compiled.compiled_forward
    block.conv.weight = torch.nn.Parameter(torch.randn(4, 3, 3, 3))
    with torch.no_grad():
        block.bn.running_var.mul_(2.0)  # in place: the same tensor
        assert _holds(function, (x,))
        torch.testing.assert_close(compiled(x), block(x))
    assert len(function.cache.entries) == 1


SCALE = 2.0


def _scaled(x: torch.Tensor) -> torch.Tensor:
    return x * SCALE


def test_a_changed_global_fails_the_entry(monkeypatch):
    compiled = rt.compile(_scaled, codegen="eager", dynamic=False)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), x * 2.0)
    assert _holds(compiled, (x,), grad=True)
    monkeypatch.setitem(globals(), "SCALE", 3.0)
    assert not _holds(compiled, (x,), grad=True)
    torch.testing.assert_close(compiled(x), x * 3.0)
