"""cat/stack/split/unbind, repeat, flip, roll, padding, triu/tril, slice_scatter, diagonal."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import prim

DTYPES = (torch.float32, torch.float16, torch.int64, torch.bool)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cat_and_stack(dh, dtype) -> None:
    dh.check(dh.one_op("cat.default", [dh.transposed(3, 4, dtype), dh.T(2, 4, dtype=dtype)]))
    dh.check(
        dh.one_op("cat.default", [dh.T(3, 4, dtype=dtype), dh.T(3, 1, dtype=torch.float64)], -1)
    )
    dh.check(dh.one_op("cat.default", [dh.T(3, 4, dtype=dtype), dh.T(0, dtype=dtype)]))
    dh.check(dh.one_op("stack.default", [dh.T(3, 4, dtype=dtype), dh.transposed(3, 4, dtype)], 1))
    dh.check(dh.one_op("stack.default", [dh.T(3, dtype=dtype), dh.T(3, dtype=dtype)], -1))


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_unbind(dh, dtype) -> None:
    dh.check(dh.one_op("split.Tensor", dh.transposed(5, 4, dtype), 2, outputs=3))
    dh.check(dh.one_op("split_with_sizes.default", dh.T(3, 6, dtype=dtype), [1, 5], -1, outputs=2))
    dh.check(dh.one_op("unbind.int", dh.T(3, 2, dtype=dtype), 1, outputs=2))


@pytest.mark.parametrize("dtype", DTYPES)
def test_repeat_flip_roll(dh, dtype) -> None:
    dh.check(dh.one_op("repeat.default", dh.transposed(2, 3, dtype), [2, 1, 3]))
    dh.check(dh.one_op("flip.default", dh.transposed(3, 4, dtype), [0, -1]))
    dh.check(dh.one_op("roll.default", dh.T(3, 4, dtype=dtype), [1, -5], [0, 1]))
    dh.check(dh.one_op("roll.default", dh.transposed(3, 4, dtype), [7]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_constant_pad(dh, dtype) -> None:
    value = True if dtype is torch.bool else 2
    dh.check(dh.one_op("constant_pad_nd.default", dh.transposed(3, 4, dtype), [1, 2], value))
    dh.check(dh.one_op("constant_pad_nd.default", dh.T(2, 3, 4, dtype=dtype), [-1, 2, 0, 1, 1, 0]))


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float64))
def test_reflection_and_replication_pad(dh, dtype) -> None:
    dh.check(dh.one_op("reflection_pad1d.default", dh.T(2, 3, 5, dtype=dtype), [2, 3]))
    dh.check(dh.one_op("reflection_pad2d.default", dh.T(2, 4, 5, dtype=dtype), [1, 2, 3, 0]))
    dh.check(dh.one_op("replication_pad1d.default", dh.T(2, 3, 5, dtype=dtype), [4, 1]))
    dh.check(dh.one_op("replication_pad2d.default", dh.T(1, 2, 4, 5, dtype=dtype), [1, 2, 3, 0]))
    dh.check(
        dh.one_op("replication_pad3d.default", dh.T(1, 2, 3, 4, 5, dtype=dtype), [1, 0, 2, 1, 0, 2])
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("diagonal", [0, 1, -2])
def test_triu_tril(dh, dtype, diagonal: int) -> None:
    dh.check(dh.one_op("triu.default", dh.T(2, 3, 5, dtype=dtype), diagonal))
    dh.check(dh.one_op("tril.default", dh.transposed(4, 3, dtype), diagonal))


@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_scatter_diagonal_copy_fill(dh, dtype) -> None:
    dh.check(
        dh.one_op(
            "slice_scatter.default", dh.T(6, 4, dtype=dtype), dh.T(2, 4, dtype=dtype), 0, 1, 5, 2
        )
    )
    dh.check(
        dh.one_op("slice_scatter.default", dh.T(3, 6, dtype=dtype), dh.T(3, 2, dtype=dtype), -1, 4)
    )
    for offset in (0, 1, -2):
        dh.check(dh.one_op("diagonal.default", dh.T(2, 4, 5, dtype=dtype), offset, 1, 2))
        dh.check(dh.one_op("diagonal.default", dh.transposed(4, 5, dtype), offset, 1, 0))
    dh.check(dh.one_op("copy.default", dh.T(3, 4, dtype=dtype), dh.T(4, dtype=torch.float64)))
    dh.check(dh.one_op("fill.Scalar", dh.T(3, 4, dtype=dtype), 1))
    dh.check(dh.one_op("fill.Tensor", dh.T(3, 4, dtype=dtype), dh.T(dtype=dtype)))


SLICES = [  # (x shape, src shape, dim, start, end, step)
    ((7, 5), (3, 5), 0, 1, 6, 2),
    ((7, 5), (7, 2), 1, None, None, 3),
    ((7, 5), (3, 5), 0, -5, None, 2),
    ((7, 5), (7, 5), 0, 0, 7, 1),
    ((2, 3, 7), (2, 3, 2), -1, 1, None, 4),
    ((2, 3, 7), (2, 3, 2), 2, 5, 99, 1),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", SLICES)
def test_slice_scatter_is_pointwise_in_the_inputs_layout(dh, dtype, case) -> None:
    """``slice_scatter`` is ``cat`` (step 1; a copy of ``src`` where it covers the dim)
    or ``where`` over a gather from ``src`` (no ``prims.scatter``, which ATen would lay
    out row-major), laid out as eager lays it out: like ``x`` (column-major here)."""
    shape, src_shape, dim, start, end, step = case
    x = dh.T(*shape, dtype=dtype, strides=_column_major(shape))
    graph = dh.one_op(
        "slice_scatter.default", x, dh.T(*src_shape, dtype=dtype), dim, start, end, step
    )
    prims = dh.check(graph)
    assert prim("scatter") not in prims.ops()
    assert prims.outputs[0].tensor_meta.strides == graph.outputs[0].tensor_meta.strides
    assert graph.outputs[0].tensor_meta.strides == x.strides


def _column_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a tensor whose last two dims are stored column-major."""
    return tuple(torch.empty(shape).mT.contiguous().mT.stride())


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.int64))
def test_dot_clamp_tensor_norm(dh, dtype) -> None:
    dh.check(dh.one_op("dot.default", dh.T(7, dtype=dtype), dh.T(7, dtype=dtype)))
    dh.check(dh.one_op("clamp_min.Tensor", dh.T(3, 4, dtype=dtype), dh.T(4, dtype=dtype)))
    dh.check(dh.one_op("clamp_max.Tensor", dh.T(3, 4, dtype=dtype), dh.T(3, 1, dtype=dtype)))
    if dtype.is_floating_point:
        dh.check(dh.one_op("norm.ScalarOpt_dim", dh.T(3, 4, dtype=dtype), 3, [1], True))
