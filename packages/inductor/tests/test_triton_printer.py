"""Typed constants of the Triton printer."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import wrapped_integer
from torchstrata.inductor.codegen.triton.printer import literal


@pytest.mark.parametrize(
    ("value", "dtype", "expected"),
    [
        (300, torch.uint8, 44),
        (-1, torch.uint8, 255),
        (-129, torch.int8, 127),
        (128, torch.int8, -128),
        (2**31, torch.int32, -(2**31)),
        (5, torch.int64, 5),
        (-(2**63), torch.int64, -(2**63)),
    ],
)
def test_integer_literals_wrap_into_their_dtype_as_aten_converts_scalars(
    value: int, dtype: torch.dtype, expected: int
) -> None:
    assert wrapped_integer(value, dtype) == expected
    assert f"tl.full([1], {expected}, " in literal(value, dtype)
