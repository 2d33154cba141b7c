"""Every kind of guarded thing changed on ONE module of a model of many (decision 0425):
the entry's check (the positional fetch check, a tuple group remembered by identity, its
reads in one ``try``) fails, and the compiled model gives eager's results after the
change. A submodule swapped, a hook added, a class's ``forward`` patched, a parameter
replaced or given another layout or shape, ``requires_grad`` flipped, a tuple
attribute given other values or made a list; a tuple of the same values (another
object) keeps the entry."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import torchstrata.runtime as rt

BLOCKS = 8


class Block(torch.nn.Module):
    """Convolution (tuple ``stride``/``padding``/``dilation``), batch norm, a
    broadcast scale parameter of shape ``(C, 1, 1)``, ReLU."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(channels)
        self.scale = torch.nn.Parameter(torch.rand(channels, 1, 1) + 0.5)
        self.relu = torch.nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn(self.conv(x)) * self.scale)


def _scaled_forward(self: Block, x: torch.Tensor) -> torch.Tensor:
    return self.relu(self.bn(self.conv(x))) * 2.0


class Net(torch.nn.Module):
    """A stem and ``BLOCKS`` blocks in a Sequential: 35 modules."""

    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, channels, 3, padding=1)
        self.blocks = torch.nn.Sequential(*(Block(channels) for _ in range(BLOCKS)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.stem(x))


def _block(net: Net, index: int) -> Block:
    block = net.blocks[index]
    assert isinstance(block, Block)
    return block


def _swap_submodule(net: Net) -> None:
    _block(net, 5).conv = torch.nn.Conv2d(4, 4, 3, padding=1, bias=False)


def _add_hook(net: Net) -> None:
    _block(net, 6).bn.register_forward_hook(lambda module, args, out: out * 3.0)


def _patch_class_forward(net: Net) -> None:
    Block.forward = _scaled_forward  # type: ignore[method-assign]  # restored by the test


def _replace_parameter_other_layout(net: Net) -> None:
    conv = _block(net, 3).conv
    weight = conv.weight.detach().contiguous(memory_format=torch.channels_last)
    conv.weight = torch.nn.Parameter(weight)  # same sizes, other strides


def _assign_data_other_layout(net: Net) -> None:
    weight = _block(net, 2).conv.weight
    weight.data = weight.detach().contiguous(memory_format=torch.channels_last)


def _change_parameter_shape(net: Net) -> None:
    _block(net, 4).scale.data = torch.full((1,), 0.5)  # broadcasts still


def _flip_requires_grad(net: Net) -> None:
    _block(net, 7).bn.weight.requires_grad_(False)


def _change_tuple_values(net: Net) -> None:
    _block(net, 1).conv.padding = (0, 0)  # the rest of the model takes 14x14


def _make_tuple_a_list(net: Net) -> None:
    _block(net, 1).conv.padding = [1, 1]  # type: ignore[assignment]


CHANGES: dict[str, Callable[[Net], None]] = {
    "submodule_swapped": _swap_submodule,
    "hook_added": _add_hook,
    "class_forward_patched": _patch_class_forward,
    "parameter_replaced_other_layout": _replace_parameter_other_layout,
    "data_assigned_other_layout": _assign_data_other_layout,
    "parameter_shape_changed": _change_parameter_shape,
    "requires_grad_flipped": _flip_requires_grad,
    "tuple_values_changed": _change_tuple_values,
    "tuple_made_a_list": _make_tuple_a_list,
}


def _entry_holds(compiled: rt.CompiledModule, x: torch.Tensor) -> bool:
    """Whether the first entry's positional check passes ``x`` (as a call runs it)."""
    function = compiled.compiled_forward
    guards = function.cache.entries[0].guards
    assert guards.fetch_args is not None, "the positional fetch check is generated"
    return guards.fetch_args((x,), function._globals) is not None


def _compiled_net() -> tuple[Net, rt.CompiledModule, torch.Tensor]:
    torch.manual_seed(0)
    net = Net().eval()
    compiled = rt.compile(net, codegen="eager")
    x = torch.randn(1, 3, 16, 16)
    torch.testing.assert_close(compiled(x), net(x))
    assert len(list(net.modules())) == 3 + 4 * BLOCKS
    assert _entry_holds(compiled, x)
    assert _entry_holds(compiled, x)  # the remembered tuples pass again
    return net, compiled, x


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_to_one_module_of_many_fails_the_entry(change, monkeypatch):
    monkeypatch.setattr(Block, "forward", Block.forward)  # restores a patched forward
    with torch.no_grad():
        net, compiled, x = _compiled_net()
        CHANGES[change](net)
        assert not _entry_holds(compiled, x)
        torch.testing.assert_close(compiled(x), net(x))


def test_a_tuple_of_the_same_values_keeps_the_entry():
    with torch.no_grad():
        net, compiled, x = _compiled_net()
        conv = _block(net, 1).conv
        conv.padding = tuple([1, 1])  # another object, equal items of the same types
        assert conv.padding is not _block(net, 0).conv.padding
        assert _entry_holds(compiled, x)
        conv.padding = (1.0, 1)  # type: ignore[assignment]  # equal under ==, a float
        assert not _entry_holds(compiled, x)
        conv.padding = tuple([1, 1])
        assert _entry_holds(compiled, x)
        torch.testing.assert_close(compiled(x), net(x))
    assert len(compiled.compiled_forward.cache) == 1
