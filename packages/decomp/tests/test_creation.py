"""arange, empty*/new_* creation."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize(
    "op, args, kwargs",
    [
        ("arange.default", (7,), {}),
        ("arange.default", (5,), {"dtype": torch.float32}),
        ("arange.start", (-3, 4), {}),
        ("arange.start_step", (0.5, 3.0, 0.3), {}),
        ("arange.start_step", (10, -3, -4), {}),
        ("arange.start_step", (0, 1, 0.1), {"dtype": torch.bfloat16}),
    ],
)
def test_arange(dh, op: str, args: tuple, kwargs: dict) -> None:
    dh.check(dh.one_op(op, *args, **kwargs))


def test_empty_and_new(dh) -> None:
    graph = dh.one_op("empty_like.default", dh.transposed(3, 4))
    prims = dh.check(graph, seeds=())
    assert prims.outputs[0].tensor_meta.shape == (3, 4)
    dh.check(dh.one_op("new_zeros.default", dh.T(2, dtype=torch.int64), [3, 2]))
    dh.check(dh.one_op("new_ones.default", dh.T(2), [3], dtype=torch.float16))
    dh.check(dh.one_op("new_full.default", dh.T(2), [2, 2], 4.5))
    dh.check(dh.one_op("empty.memory_format", [2, 3], dtype=torch.float32), seeds=())


def test_eye_and_vdot(dh) -> None:
    dh.check(dh.one_op("eye.default", 3))
    dh.check(dh.one_op("eye.m", 3, 5, dtype=torch.bool))
    dh.check(dh.one_op("vdot.default", dh.T(6), dh.T(6)))
