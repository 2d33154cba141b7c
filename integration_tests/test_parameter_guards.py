"""Every change to a compiled module's parameters that the compiled code depends on fails
its entry's guards (decision 0241): a parameter replaced, its ``.data`` assigned, its
``requires_grad`` flipped, its dtype changed by ``module.to``, its storage resized in
place, and the module switched between ``train()`` and ``eval()``, in a static entry
and in a symbolic one (whose inputs' sizes are checked apart from the parameters'). After
each change the compiled module gives eager's results (a new entry, or eager)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import torchstrata.runtime as rt


class Net(torch.nn.Module):
    """A linear layer, dropout (reads ``self.training``) and a scale parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 6)
        self.dropout = torch.nn.Dropout(0.5)
        self.scale = torch.nn.Parameter(torch.ones(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.linear(x)) * self.scale


def _replace(net: Net) -> None:
    net.linear.weight = torch.nn.Parameter(torch.randn(8, 6).t())  # other strides


def _assign_data(net: Net) -> None:
    net.linear.weight.data = torch.randn(8, 6).t()  # same sizes, other strides


def _assign_data_of_another_size(net: Net) -> None:
    net.scale.data = torch.ones(1)


def _flip_requires_grad(net: Net) -> None:
    net.scale.requires_grad_(False)


def _to_double(net: Net) -> None:
    net.to(torch.float64)


def _train(net: Net) -> None:
    net.train()


CHANGES: dict[str, Callable[[Net], None]] = {
    "replaced": _replace,
    "data_assigned": _assign_data,
    "data_assigned_other_size": _assign_data_of_another_size,
    "requires_grad_flipped": _flip_requires_grad,
    "dtype_by_to": _to_double,
    "train": _train,
}


def _entry_holds(compiled: rt.CompiledModule, x: torch.Tensor) -> bool:
    function = compiled.compiled_forward
    guards = function.cache.entries[0].guards
    check = guards.fetch_args or guards.check_args
    assert check is not None
    result = check((x,), function._globals)
    return (result is not None and not isinstance(result, int)) or result == -1


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_a_changed_parameter_fails_the_guard(change, dynamic):
    torch.manual_seed(0)
    net = Net().eval()
    compiled = rt.compile(net, codegen="eager", dynamic=dynamic)
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), net(x))
        assert _entry_holds(compiled, x)
        CHANGES[change](net)
        inputs = x.double() if change == "dtype_by_to" else x
        assert not _entry_holds(compiled, inputs)
        if change != "train":  # dropout in training mode draws random numbers
            torch.testing.assert_close(compiled(inputs), net(inputs))


def test_a_parameter_resized_in_place_fails_the_guard():
    torch.manual_seed(0)
    net = Net().eval()
    net.scale.requires_grad_(False)  # resize_ refuses a tensor that requires grad
    compiled = rt.compile(net, codegen="eager")
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), net(x))
        assert _entry_holds(compiled, x)
        net.scale.resize_(1)  # broadcasts still; the graph was traced for 6
        net.scale.fill_(2.0)
        assert not _entry_holds(compiled, x)
        torch.testing.assert_close(compiled(x), net(x))


def test_a_parameter_changed_in_place_keeps_the_entry():
    """Values are not guarded: an optimizer step (in place) runs the same entry."""
    torch.manual_seed(0)
    net = Net().eval()
    compiled = rt.compile(net, codegen="eager")
    x = torch.randn(3, 8)
    with torch.no_grad():
        compiled(x)
        net.linear.weight.mul_(0.5)
        assert _entry_holds(compiled, x)
        torch.testing.assert_close(compiled(x), net(x))
    assert len(compiled.compiled_forward.cache) == 1


def test_a_parameter_replaced_by_one_of_the_same_layout_is_read_anew():
    """Parameters are inputs of the graph, read on every call: one replaced by another of
    the same layout runs the same entry with the new values."""
    torch.manual_seed(0)
    net = Net().eval()
    compiled = rt.compile(net, codegen="eager")
    x = torch.randn(3, 8)
    with torch.no_grad():
        compiled(x)
        net.linear.weight = torch.nn.Parameter(torch.randn(6, 8))
        assert _entry_holds(compiled, x)
        torch.testing.assert_close(compiled(x), net(x))
