"""Type promotion on metadata agrees with torch.result_type."""

from __future__ import annotations

import itertools

import pytest
import torch

from torchstrata.core import TensorMeta
from torchstrata.decomp import Promotion, computation_dtype, promoted_dtypes, result_type

DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
)
SCALARS = (True, 3, 2.5, 1j)


def _operand(kind: str, dtype: torch.dtype) -> tuple[TensorMeta, torch.Tensor]:
    shape = (3,) if kind == "dim" else ()
    return TensorMeta(shape, dtype), torch.zeros(shape, dtype=dtype)


@pytest.mark.parametrize("a_kind,b_kind", [("dim", "dim"), ("dim", "zero"), ("zero", "zero")])
def test_tensor_pairs_match_torch(a_kind: str, b_kind: str) -> None:
    for a, b in itertools.product(DTYPES, DTYPES):
        (ma, ta), (mb, tb) = _operand(a_kind, a), _operand(b_kind, b)
        assert result_type(ma, mb) == torch.result_type(ta, tb), (a_kind, a, b_kind, b)


@pytest.mark.parametrize("kind", ["dim", "zero"])
def test_python_scalars_match_torch(kind: str) -> None:
    for dtype, scalar in itertools.product(DTYPES, SCALARS):
        meta, tensor = _operand(kind, dtype)
        assert result_type(meta, scalar) == torch.result_type(tensor, scalar), (dtype, scalar)
        assert result_type(scalar, meta) == torch.result_type(scalar, tensor), (dtype, scalar)


def test_int_to_float_and_bool_results() -> None:
    i64 = TensorMeta((2,), torch.int64)
    assert promoted_dtypes(i64, 2, kind=Promotion.INT_TO_FLOAT) == (torch.float32, torch.float32)
    assert (
        promoted_dtypes(TensorMeta((2,), torch.bool), kind=Promotion.INT_TO_FLOAT)[1]
        is torch.float32
    )
    assert promoted_dtypes(i64, 2.5, kind=Promotion.ALWAYS_BOOL) == (torch.float32, torch.bool)
    assert promoted_dtypes(TensorMeta((2,), torch.float16), 1.5) == (torch.float16, torch.float16)


def test_computation_dtype_upcasts_low_precision_only() -> None:
    assert computation_dtype(torch.float16) is torch.float32
    assert computation_dtype(torch.bfloat16) is torch.float32
    assert computation_dtype(torch.float64) is torch.float64
    assert computation_dtype(torch.int32) is torch.int32
