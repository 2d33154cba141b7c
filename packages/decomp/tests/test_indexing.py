"""gather/scatter/index_select, advanced indexing and index_put."""

from __future__ import annotations

import pytest
import torch

LONG = torch.int64
DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.bool)


def _in_range(size: int, negative: bool = False):
    def prepare(inputs):
        for t in inputs[1:]:
            if t.dtype is LONG:
                t.remainder_(size)
                if negative:
                    t.sub_(size * (t % 2))

    return prepare


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_index_select(dh, dtype) -> None:
    dh.check(
        dh.one_op("gather.default", dh.transposed(4, 5, dtype), 1, dh.T(4, 3, dtype=LONG)),
        prepare=_in_range(5),
    )
    dh.check(
        dh.one_op("index_select.default", dh.transposed(4, 5, dtype), 0, dh.T(6, dtype=LONG)),
        prepare=_in_range(4),
    )
    dh.check(
        dh.one_op("index_select.default", dh.T(4, 5, 2, dtype=dtype), -2, dh.T(3, dtype=LONG)),
        prepare=_in_range(4),
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter(dh, dtype) -> None:
    def unique_rows(inputs):
        inputs[1].copy_(torch.stack([torch.randperm(4)[:3] for _ in range(5)], 1))

    dh.check(
        dh.one_op(
            "scatter.src",
            dh.T(4, 5, dtype=dtype),
            0,
            dh.T(3, 5, dtype=LONG),
            dh.T(3, 6, dtype=dtype),
        ),
        prepare=unique_rows,
    )
    dh.check(
        dh.one_op("scatter.value", dh.T(4, 5, dtype=dtype), 0, dh.T(3, 5, dtype=LONG), 2),
        prepare=unique_rows,
    )
    if dtype is not torch.bool:
        dh.check(
            dh.one_op(
                "scatter_add.default",
                dh.T(4, 5, dtype=dtype),
                0,
                dh.T(3, 5, dtype=LONG),
                dh.T(3, 5, dtype=dtype),
            ),
            prepare=_in_range(4),
        )


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.int64))
@pytest.mark.parametrize(
    "pattern",
    [
        "i",  # x[i]
        "_i",  # x[:, i]
        "ii",  # x[i, j] broadcast
        "i_i",  # non-adjacent: index dims go first
        "_ii",  # adjacent, after a slice
    ],
)
def test_index_and_index_put(dh, dtype, pattern: str) -> None:
    shape = (4, 5, 6)
    indices = [dh.T(2, 3, dtype=LONG) if c == "i" else None for c in pattern]
    dh.check(
        dh.one_op("index.Tensor", dh.T(*shape, dtype=dtype), indices),
        prepare=_in_range(4, negative=True),
    )
    values = dh.T(1, dtype=dtype)

    def unique(inputs):
        rows = ([0, -1, 2], [1, 0, -2])
        for position in range(pattern.count("i")):
            inputs[1 + position].copy_(torch.tensor(rows[position]))

    put_indices = [dh.T(3, dtype=LONG) if c == "i" else None for c in pattern]
    dh.check(
        dh.one_op("index_put.default", dh.T(*shape, dtype=dtype), put_indices, values),
        prepare=unique,
    )
    if dtype is not torch.bool:
        dh.check(
            dh.one_op("index_put.default", dh.T(*shape, dtype=dtype), indices, values, True),
            prepare=_in_range(4),
        )


def test_int32_indices_are_widened(dh) -> None:
    def in_range(inputs):
        inputs[1].remainder_(5)

    graph = dh.one_op("gather.default", dh.T(4, 5), 1, dh.T(4, 3, dtype=torch.int32))
    dh.check(graph, prepare=in_range)
