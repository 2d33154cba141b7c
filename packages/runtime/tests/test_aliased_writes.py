"""A graph that writes an input which shares memory with another input of the same call
runs that call eagerly (``input_checks.alias_safe``): the traced graph read the two as
separate values."""

from __future__ import annotations

import torch

from torchstrata.runtime.input_checks import ComparedInputs, _plain_positions, aliased_write


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


def test_parameters_are_not_compared():
    x = torch.randn(3, 4)
    weight = torch.nn.Parameter(torch.randn(2))
    assert not aliased_write([weight, x], (1,))


def test_the_first_calls_positions_pick_the_plain_tensors():
    weight, x, y = torch.nn.Parameter(torch.randn(2)), torch.randn(3), torch.randn(3)
    plain = _plain_positions([weight, x, y, 5], (1,))
    assert plain([weight, x, y, 5]) == (y,)
    z = torch.randn(3)
    assert plain([weight, x, z, 5]) == (z,)
    assert aliased_write([weight, x, x[1:], 5], (1,), plain([weight, x, x[1:], 5]))


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
