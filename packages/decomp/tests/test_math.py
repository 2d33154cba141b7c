"""Trig, rounding, predicates, logical/bitwise ops, lerp, addcmul/addcdiv."""

from __future__ import annotations

import pytest
import torch

FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
ALL = (*FLOATS, torch.int64, torch.bool)


@pytest.mark.parametrize("dtype", (*FLOATS, torch.int64))
@pytest.mark.parametrize(
    "op", ["tan", "atan", "sinh", "cosh", "floor", "ceil", "round", "trunc", "sign", "square"]
)
def test_unary(dh, op: str, dtype: torch.dtype) -> None:
    dh.check(dh.one_op(f"{op}.default", dh.transposed(3, 4, dtype)))


def test_asin_acos_in_domain(dh) -> None:
    def shrink(inputs):
        inputs[0].copy_(inputs[0].clamp(-0.9, 0.9))

    for op in ("asin", "acos"):
        dh.check(dh.one_op(f"{op}.default", dh.T(3, 4)), prepare=shrink)


@pytest.mark.parametrize("dtype", ALL)
def test_predicates_and_logical(dh, dtype: torch.dtype) -> None:
    dh.check(dh.one_op("isnan.default", dh.T(3, 4, dtype=dtype)))
    dh.check(dh.one_op("isinf.default", dh.T(3, 4, dtype=dtype)))
    dh.check(dh.one_op("logical_not.default", dh.T(3, 4, dtype=dtype)))
    for op in ("logical_and", "logical_or", "logical_xor"):
        dh.check(dh.one_op(f"{op}.default", dh.T(3, 4, dtype=dtype), dh.T(4, dtype=torch.bool)))


@pytest.mark.parametrize("dtype", (torch.int64, torch.int32, torch.bool))
def test_bitwise(dh, dtype: torch.dtype) -> None:
    for op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        dh.check(dh.one_op(f"{op}.Tensor", dh.T(3, 4, dtype=dtype), dh.T(4, dtype=dtype)))
    dh.check(dh.one_op("bitwise_not.default", dh.T(3, 4, dtype=dtype)))


@pytest.mark.parametrize("dtype", (*FLOATS, torch.int64))
def test_binary_math(dh, dtype: torch.dtype) -> None:
    dh.check(
        dh.one_op("remainder.Tensor", dh.T(3, 4, dtype=dtype), dh.T(4, dtype=dtype)),
        prepare=dh.nonzero,
    )
    dh.check(dh.one_op("fmod.Scalar", dh.T(3, 4, dtype=dtype), 3))
    if dtype.is_floating_point:
        dh.check(dh.one_op("atan2.default", dh.T(3, 4, dtype=dtype), dh.T(4, dtype=dtype)))
        dh.check(dh.one_op("lerp.Scalar", dh.T(3, 4, dtype=dtype), dh.T(4, dtype=dtype), 0.3))
        dh.check(dh.one_op("lerp.Scalar", dh.T(3, 4, dtype=dtype), dh.T(4, dtype=dtype), 0.8))
        dh.check(
            dh.one_op(
                "lerp.Tensor",
                dh.T(3, 4, dtype=dtype),
                dh.T(4, dtype=dtype),
                dh.T(3, 1, dtype=dtype),
            )
        )
        dh.check(
            dh.one_op(
                "addcdiv.default",
                dh.T(3, 4, dtype=dtype),
                dh.T(4, dtype=dtype),
                dh.T(3, 4, dtype=dtype),
                value=0.5,
            ),
            prepare=dh.nonzero,
        )
    dh.check(
        dh.one_op(
            "addcmul.default",
            dh.T(3, 4, dtype=dtype),
            dh.T(4, dtype=dtype),
            dh.T(3, 4, dtype=dtype),
            value=2,
        )
    )
