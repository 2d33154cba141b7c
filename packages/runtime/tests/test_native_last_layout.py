"""The native last layout of a routed symbolic entry (decision 0475): it returns the
route it remembered exactly when every tensor's sizes and strides are the remembered
ones, as the Python comparison of ``.shape`` and ``.stride()`` answers."""

from __future__ import annotations

import random
import shutil
from typing import Any

import pytest
import torch

from torchstrata.runtime import native_guards
from torchstrata.runtime.native_guards import TensorChecks, tensor_checks


@pytest.fixture(scope="module")
def checks() -> TensorChecks:
    found = tensor_checks(True)
    if found is None:  # only a machine without a C++ compiler may lack them
        assert not (shutil.which("g++") or shutil.which("c++")), native_guards.unavailable_reason()
        pytest.skip("no C++ compiler: the guards stay Python conditions")
    return found


def _layout(*tensors: torch.Tensor) -> tuple[Any, ...]:
    return tuple(read for t in tensors for read in (t.shape, t.stride()))


def _random_tensor(rng: random.Random) -> torch.Tensor:
    shape = [rng.choice((0, 1, 2, 3)) for _ in range(rng.choice((0, 1, 2, 3)))]
    tensor = torch.zeros(shape)
    if tensor.dim() >= 2 and rng.random() < 0.3:
        tensor = tensor.transpose(0, 1)
    if tensor.dim() >= 1 and rng.random() < 0.2:
        tensor = torch.zeros([2 * s for s in shape])[tuple(slice(None, None, 2) for _ in shape)]
    return tensor


def test_nothing_remembered_routes_nothing(checks):
    last = checks.last_layout(1)
    assert last(torch.zeros(2)) is None


def test_the_route_is_returned_exactly_for_the_remembered_layout(checks):
    rng = random.Random(0)
    last, route = checks.last_layout(2), ("runner",)
    hits = 0
    remembered = (_random_tensor(rng), _random_tensor(rng))
    last.remember(route, *remembered)
    for _ in range(400):
        if rng.random() < 0.3:
            remembered = (_random_tensor(rng), _random_tensor(rng))
            last.remember(route, *remembered)
        values = [_random_tensor(rng), _random_tensor(rng)]
        for i, tensor in enumerate(remembered):
            if rng.random() < 0.6:  # another tensor of the remembered layout
                values[i] = torch.empty_strided(tensor.shape, tensor.stride())
        same = _layout(*values) == _layout(*remembered)
        assert (last(*values) is route) == same, (_layout(*values), _layout(*remembered))
        hits += same
    assert 20 < hits < 380  # both answers were compared


def test_other_values_and_counts_route_nothing(checks):
    x, w = torch.zeros(4, 8), torch.zeros(8)
    last, route = checks.last_layout(2), object()
    last.remember(route, x, w)
    assert last(torch.ones(4, 8), torch.ones(8)) is route  # the layout, not the values
    assert last(x) is None and last(x, w, w) is None
    assert last(x, (8,)) is None and last(x, None) is None
    assert last(torch.zeros(4, 8, 1), w) is None and last(torch.zeros(8, 4).t(), w) is None
    assert last(x.to_sparse(), w) is None  # no strides: the C++ exception is a miss
    with pytest.raises(TypeError):
        last.remember(route, x)
    with pytest.raises(TypeError):
        last.remember(route, x, "w")
    assert last(x, w) is route  # a refused remember forgets nothing


def test_a_remember_that_cannot_read_a_layout_forgets_the_route(checks):
    x, w = torch.zeros(4, 8), torch.zeros(8)
    last, route = checks.last_layout(2), object()
    last.remember(route, x, w)
    last.remember(object(), x.to_sparse(), w)  # no strides
    assert last(x, w) is None


def test_a_resized_tensor_misses(checks):
    buffer, w = torch.zeros(8), torch.zeros(2)
    last, route = checks.last_layout(2), object()
    last.remember(route, buffer, w)
    buffer.resize_(4)
    assert last(buffer, w) is None
    buffer.resize_(8)
    assert last(buffer, w) is route
