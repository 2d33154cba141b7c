"""``schedule.view_strides``: ATen's view strides computed in Python (decision 0382), equal
to a meta tensor's ``view`` over permuted and sliced layouts, None where ATen refuses."""

from __future__ import annotations

import random

import pytest
import torch

from torchstrata.inductor.schedule.view_strides import view_strides


def _factors(total: int, rng: random.Random) -> list[int]:
    shape: list[int] = []
    while total > 1 and len(shape) < 4:
        factor = rng.choice([d for d in range(1, total + 1) if total % d == 0])
        shape.append(factor)
        total //= factor
    shape.append(total)
    if rng.random() < 0.3:
        shape.insert(rng.randint(0, len(shape)), 1)
    return shape


def test_view_strides_match_aten_on_random_layouts():
    rng = random.Random(0)
    refused = 0
    for _ in range(1500):
        shape = [rng.choice([1, 2, 3, 4, 6]) for _ in range(rng.randint(1, 4))]
        padded = torch.empty(*[s + rng.choice([0, 0, 1]) for s in shape], device="meta")
        order = list(range(len(shape)))
        rng.shuffle(order)
        tensor = padded[tuple(slice(0, s) for s in shape)].permute(order)
        new = _factors(tensor.numel(), rng)
        try:
            want = tuple(tensor.view(new).stride())
        except RuntimeError:
            want = None
            refused += 1
        assert view_strides(tuple(tensor.shape), tensor.stride(), new) == want, (
            tuple(tensor.shape),
            tensor.stride(),
            new,
        )
    assert 100 < refused < 1400  # both answers were checked


def test_a_zero_dim_is_left_to_the_copy():
    assert view_strides((0, 3), (3, 1), (3, 0)) is None


def test_a_symbolic_size_that_is_zero_here_is_seen():
    # ``type(size) is int`` missed a SizeValue of 0 (``s0 - 2`` at 2): that lowering took
    # the view where ints take the copy, and one made elsewhere served 2 unrecorded (0405)
    from torchstrata.core import SizeGuards, SizeRead

    at_two = SizeGuards({"s0": 2})
    rows = at_two.symbol("s0") - 2
    with pytest.raises(SizeRead):  # pins the size: 2 lowers on its own, as ints do
        view_strides((rows, 4), (4, 1), (rows * 4,))
    at_five = SizeGuards({"s0": 5})
    rows = at_five.symbol("s0") - 2
    assert view_strides((rows, 4), (4, 1), (rows * 4,)) == (1,)
    assert not at_five.holds({"s0": 2}) and at_five.holds({"s0": 7})
