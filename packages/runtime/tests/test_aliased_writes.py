"""A graph that writes an input which shares memory with another input of the same call
runs that call eagerly (``input_checks.alias_safe``): the traced graph read the two as
separate values."""

from __future__ import annotations

import torch

from torchstrata.runtime import input_checks
from torchstrata.runtime.input_checks import (
    ComparedInputs,
    _plain_positions,
    _storage_holders,
    aliased_write,
)


def test_a_view_of_a_written_input_is_seen():
    x = torch.randn(3, 4)
    assert aliased_write([x, x[1]], (0,))
    assert aliased_write([x[1], x], (0,))
    assert aliased_write([x, x], (0,))  # the same tensor twice


def test_two_written_inputs_that_share_memory_are_seen():
    x = torch.randn(3, 4)
    assert aliased_write([x[0], x[0, 1:]], (0, 1))
    assert aliased_write([x[:, 1], x[1]], (0, 1))


def test_separate_tensors_and_empty_ones_are_not_aliases():
    x, y = torch.randn(3, 4), torch.randn(4)
    assert not aliased_write([x, y], (0,))
    assert not aliased_write([torch.empty(0), torch.empty(0)], (0, 1))
    assert not aliased_write([x, 3, None], (0,))


def test_disjoint_parts_of_one_buffer_are_not_aliases():
    kv = torch.randn(2, 3, 4)  # a key and a value cache cut from one buffer
    assert not aliased_write([kv[0], kv[1]], (0, 1))
    assert not aliased_write([kv[0], kv[1, 2]], (0,))
    assert aliased_write([kv[0], kv[0, 2]], (0,))
    assert aliased_write([kv[:, 1], kv[1, 1, :2]], (0,))


def test_a_parameter_of_its_own_memory_is_not_an_alias():
    x = torch.randn(3, 4)
    weight = torch.nn.Parameter(torch.randn(2))
    assert not aliased_write([weight, x], (1,))


class _Picker:
    """A ``parameters`` picker that records whether it was asked."""

    def __init__(self, *positions: int) -> None:
        self.positions, self.calls = positions, 0

    def __call__(self, inputs):
        self.calls += 1
        return tuple(inputs[p] for p in self.positions)


def test_a_parameter_over_a_written_input_is_seen():
    x = torch.randn(3, 4)
    weight = torch.nn.Parameter(x)  # one more tensor over x's storage
    picker = _Picker(0)
    assert aliased_write([weight, x], (1,), (), picker)
    assert picker.calls == 1
    assert aliased_write([weight, x], (1,))  # the default picks the parameters
    row = torch.nn.Parameter(x[1])
    assert aliased_write([x, row], (0,))
    linear = torch.nn.Linear(4, 3)
    linear.weight.data = x[:3]
    assert aliased_write([x, linear.weight], (0,))
    assert not aliased_write([x[:1], torch.nn.Parameter(x[1:])], (0,))  # disjoint rows


def test_parameters_are_not_looked_up_when_only_the_inputs_hold_the_written_storage():
    x, y = torch.randn(3, 4), torch.randn(4)
    weights = [torch.nn.Parameter(torch.randn(2)) for _ in range(3)]
    picker = _Picker(2, 3, 4)
    assert not aliased_write([x, y, *weights], (0,), (y,), picker)
    kv = torch.randn(2, 3)
    key, value = kv.unbind(0)
    del kv  # the views alone hold the buffer, and both are inputs
    assert not aliased_write([key, value, *weights], (0,), (value,), picker)
    assert picker.calls == 0


def test_parameters_are_looked_up_when_another_tensor_holds_the_written_storage():
    x = torch.randn(3, 4)
    kept = x[2]  # a view the caller keeps: it could as well be a parameter
    weights = [torch.nn.Parameter(torch.randn(2)) for _ in range(2)]
    picker = _Picker(1, 2)
    assert not aliased_write([x, *weights], (0,), (), picker)
    assert picker.calls == 1
    del kept


def test_a_written_view_of_a_parameter_is_compared_with_the_parameter():
    weight = torch.nn.Parameter(torch.randn(4), requires_grad=False)
    tail = weight[1:]  # its base, the parameter, is not counted as a known holder
    assert type(tail) is torch.Tensor
    assert aliased_write([tail, weight], (0,), (), _Picker(1))


def test_a_base_set_to_other_memory_is_not_counted_as_a_holder():
    base = torch.randn(4)
    view = base[1:]
    base.data = torch.randn(4)  # the view keeps the old memory, the base no longer does
    weight = torch.nn.Parameter(view)
    assert aliased_write([view, weight], (0,), (), _Picker(1))


def test_a_written_parameter_is_compared_with_the_other_parameters():
    weight = torch.nn.Parameter(torch.randn(4))
    picker = _Picker(1)
    assert aliased_write([weight, weight], (0,), (), picker)  # read at another position
    assert picker.calls == 1
    assert not aliased_write([weight, torch.nn.Parameter(torch.randn(4))], (0,), (), picker)


def test_an_input_read_at_two_positions_counts_as_one_holder():
    x = torch.randn(6)
    written, read = x[:3], x[3:]
    weight = torch.nn.Parameter(x[:2])
    del x
    assert aliased_write([written, read, read, weight], (0,), (read, read), _Picker(3))


def test_storage_holders_count_the_tensors_over_a_storage():
    x = torch.randn(4)
    assert _storage_holders(x.untyped_storage()) == 1
    view = x[1:]
    assert _storage_holders(x.untyped_storage()) == 2
    weight = torch.nn.Parameter(x)
    assert _storage_holders(x.untyped_storage()) == 3
    del view, weight
    assert _storage_holders(x.untyped_storage()) == 1


def test_without_storage_reference_counts_the_parameters_are_always_compared(monkeypatch):
    monkeypatch.setattr(input_checks, "_STORAGE_USE_COUNT", None)
    x = torch.randn(3)
    picker = _Picker(1)
    assert not aliased_write([x, torch.nn.Parameter(torch.randn(3))], (0,), (), picker)
    assert picker.calls == 1
    assert aliased_write([x, torch.nn.Parameter(x)], (0,), (), picker)


def test_the_first_calls_positions_pick_the_plain_tensors():
    weight, x, y = torch.nn.Parameter(torch.randn(2)), torch.randn(3), torch.randn(3)
    plain = _plain_positions([weight, x, y, 5], (1,))
    assert plain([weight, x, y, 5]) == (y,)
    z = torch.randn(3)
    assert plain([weight, x, z, 5]) == (z,)
    assert aliased_write([weight, x, x[1:], 5], (1,), plain([weight, x, x[1:], 5]))


def test_compared_inputs_pick_the_parameters_not_written():
    weight, x, y = torch.nn.Parameter(torch.randn(3)), torch.randn(3), torch.randn(3)
    written_weight = torch.nn.Parameter(torch.randn(3))
    compared = ComparedInputs([weight, x, written_weight, y], (1, 2))
    assert compared.parameters([weight, x, written_weight, y]) == (weight,)


def test_a_parameter_position_that_holds_a_plain_tensor_is_compared():
    weight, x, y = torch.nn.Parameter(torch.randn(3)), torch.randn(3), torch.randn(3)
    compared = ComparedInputs([weight, x, y, 5], (1,))
    assert compared([weight, x, y, 5]) == (y,)  # parameters are not compared
    assert not aliased_write([weight, x, y, 5], (1,), compared([weight, x, y, 5]))
    tensors = [x[1:], x, y, 5]  # a plain tensor where the parameter was, aliasing x
    seen = compared(tensors)
    assert len(seen) == 2 and seen[0] is tensors[0] and seen[1] is y
    assert aliased_write(tensors, (1,), compared(tensors))
    assert not aliased_write([x.clone(), x, y, 5], (1,), compared([x.clone(), x, y, 5]))


def test_parameters_alone_are_compared_by_type_only():
    weights = [torch.nn.Parameter(torch.randn(3)) for _ in range(3)]
    x = torch.randn(3)
    compared = ComparedInputs([x, *weights], (0,))
    assert compared([x, *weights]) == ()
    other = torch.nn.Parameter(torch.randn(3))
    assert compared([x, weights[0], other, weights[2]]) == ()  # another parameter
    plain = torch.randn(3)
    (seen,) = compared([x, weights[0], plain, weights[2]])
    assert seen is plain
