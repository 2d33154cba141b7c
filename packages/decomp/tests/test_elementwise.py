"""Elementwise rules against the ATen graph in the reference interpreter."""

from __future__ import annotations

import pytest
import torch

FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
INTS = (torch.int64, torch.int32)

ALL = (*FLOATS, *INTS)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", ["add.Tensor", "sub.Tensor", "mul.Tensor"])
def test_arithmetic_broadcasts(dh, op: str, dtype: torch.dtype) -> None:
    dh.check(dh.one_op(op, dh.T(4, 1, 5, dtype=dtype), dh.T(3, 1, dtype=dtype)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_add_alpha_and_non_contiguous(dh, dtype: torch.dtype) -> None:
    dh.check(dh.one_op("add.Tensor", dh.transposed(6, 5, dtype), dh.T(5, dtype=dtype), alpha=0.5))
    dh.check(dh.one_op("sub.Tensor", dh.T(6, 5, dtype=dtype), dh.transposed(6, 5, dtype), alpha=3))


def test_mixed_dtypes_promote(dh) -> None:
    dh.check(dh.one_op("add.Tensor", dh.T(4, dtype=torch.int32), dh.T(4, dtype=torch.float16)))
    dh.check(
        dh.one_op("mul.Tensor", dh.T(4, dtype=torch.bfloat16), dh.T(dtype=torch.float64))
    )  # 0-dim
    dh.check(dh.one_op("add.Tensor", dh.T(4, dtype=torch.bool), dh.T(4, dtype=torch.bool)))
    dh.check(dh.one_op("mul.Tensor", dh.T(4, dtype=torch.bool), dh.T(4, dtype=torch.int64)))


@pytest.mark.parametrize("dtype", (*ALL, torch.bool))
@pytest.mark.parametrize("scalar", [2, 0.5, True])
def test_scalar_overloads(dh, dtype: torch.dtype, scalar: object) -> None:
    if dtype is torch.bool and scalar is not True:
        dh.check(dh.one_op("mul.Tensor", dh.T(3, 4, dtype=dtype), scalar))
        return
    dh.check(dh.one_op("add.Scalar", dh.T(3, 4, dtype=dtype), scalar))
    dh.check(dh.one_op("mul.Scalar", dh.T(3, 4, dtype=dtype), scalar))
    if dtype is not torch.bool and scalar is not True:
        dh.check(dh.one_op("sub.Scalar", dh.T(3, 4, dtype=dtype), scalar, alpha=2))
        dh.check(dh.one_op("rsub.Scalar", dh.T(3, 4, dtype=dtype), scalar))


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_div_rounding_modes(dh, dtype: torch.dtype, mode: str | None) -> None:
    kwargs = {"rounding_mode": mode} if mode else {}
    op = "div.Tensor_mode" if mode else "div.Tensor"
    dh.check(
        dh.one_op(op, dh.T(4, 6, dtype=dtype), dh.T(6, dtype=dtype), **kwargs), prepare=dh.nonzero
    )
    dh.check(
        dh.one_op(op, dh.transposed(4, 6, dtype), dh.T(4, 6, dtype=dtype), **kwargs),
        prepare=dh.nonzero,
    )
    scalar_op = "div.Scalar_mode" if mode else "div.Scalar"
    dh.check(dh.one_op(scalar_op, dh.T(5, dtype=dtype), -3, **kwargs))
    dh.check(dh.one_op(scalar_op, dh.T(5, dtype=dtype), 2.5, **kwargs))


def test_floor_division_edge_values(dh) -> None:
    graph = dh.one_op("div.Tensor_mode", dh.T(8), dh.T(8), rounding_mode="floor")

    def edges(inputs: list[torch.Tensor]) -> None:
        inputs[0].copy_(torch.tensor([7.0, -7.0, 7.0, -7.0, 0.0, -0.0, 1.0, 5.0]))
        inputs[1].copy_(torch.tensor([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 0.0, 0.1]))

    dh.check(graph, prepare=edges)


@pytest.mark.parametrize("dtype", (*FLOATS, *INTS, torch.bool))
@pytest.mark.parametrize(
    "op", ["exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "sin", "log1p", "reciprocal"]
)
def test_float_unary(dh, op: str, dtype: torch.dtype) -> None:
    dh.check(dh.one_op(f"{op}.default", dh.T(3, 5, dtype=dtype)))


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", ["neg", "abs", "relu"])
def test_same_dtype_unary(dh, op: str, dtype: torch.dtype) -> None:
    dh.check(dh.one_op(f"{op}.default", dh.transposed(3, 5, dtype)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_activations(dh, dtype: torch.dtype) -> None:
    dh.check(dh.one_op("silu.default", dh.T(4, 7, dtype=dtype)))
    dh.check(dh.one_op("gelu.default", dh.transposed(4, 7, dtype)))
    dh.check(dh.one_op("gelu.default", dh.T(4, 7, dtype=dtype), approximate="tanh"))


@pytest.mark.parametrize("dtype", ALL)
def test_pow(dh, dtype: torch.dtype) -> None:
    dh.check(dh.one_op("pow.Tensor_Scalar", dh.T(3, 4, dtype=dtype), 2))
    dh.check(dh.one_op("pow.Tensor_Scalar", dh.T(3, 4, dtype=dtype), 0.5))
    dh.check(dh.one_op("pow.Tensor_Scalar", dh.T(3, 4, dtype=dtype), 3.0))
    if dtype.is_floating_point:
        dh.check(dh.one_op("pow.Tensor_Tensor", dh.T(3, 4, dtype=dtype), dh.T(4, dtype=dtype)))


@pytest.mark.parametrize("dtype", ALL)
def test_minimum_maximum_clamp(dh, dtype: torch.dtype) -> None:
    dh.check(dh.one_op("maximum.default", dh.T(3, 4, dtype=dtype), dh.T(4, dtype=dtype)))
    dh.check(dh.one_op("minimum.default", dh.transposed(4, 3, dtype), dh.T(1, 3, dtype=dtype)))
    dh.check(dh.one_op("clamp.default", dh.T(3, 4, dtype=dtype), -1, 1))
    dh.check(dh.one_op("clamp.default", dh.T(3, 4, dtype=dtype), None, 0.5))
    dh.check(dh.one_op("clamp.default", dh.T(3, 4, dtype=dtype), min=-0.25))
    dh.check(
        dh.one_op(
            "clamp.Tensor", dh.T(3, 4, dtype=dtype), dh.T(4, dtype=dtype), dh.T(3, 1, dtype=dtype)
        )
    )


@pytest.mark.parametrize("dtype", (*ALL, torch.bool))
@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons(dh, op: str, dtype: torch.dtype) -> None:
    dh.check(dh.one_op(f"{op}.Tensor", dh.T(3, 4, dtype=dtype), dh.transposed(3, 4, dtype)))
    dh.check(dh.one_op(f"{op}.Tensor", dh.T(3, 4, dtype=dtype), dh.T(4, dtype=torch.float32)))
    dh.check(dh.one_op(f"{op}.Scalar", dh.T(3, 4, dtype=dtype), 0))
    dh.check(dh.one_op(f"{op}.Scalar", dh.T(3, 4, dtype=dtype), 0.5))


@pytest.mark.parametrize("dtype", (*ALL, torch.bool))
def test_where_and_masked_fill(dh, dtype: torch.dtype) -> None:
    dh.check(
        dh.one_op(
            "where.self",
            dh.T(3, 1, dtype=torch.bool),
            dh.T(3, 4, dtype=dtype),
            dh.T(4, dtype=dtype),
        )
    )
    dh.check(
        dh.one_op(
            "where.self",
            dh.T(4, dtype=torch.bool),
            dh.T(3, 4, dtype=dtype),
            dh.T(dtype=torch.float64),
        )
    )
    dh.check(
        dh.one_op("masked_fill.Scalar", dh.transposed(3, 4, dtype), dh.T(4, dtype=torch.bool), 1)
    )
    dh.check(
        dh.one_op(
            "masked_fill.Tensor",
            dh.T(3, 4, dtype=dtype),
            dh.T(3, 4, dtype=torch.bool),
            dh.T(dtype=dtype),
        )
    )
    if dtype.is_floating_point:
        dh.check(
            dh.one_op(
                "masked_fill.Scalar",
                dh.T(3, 4, dtype=dtype),
                dh.T(3, 4, dtype=torch.bool),
                float("-inf"),
            )
        )
