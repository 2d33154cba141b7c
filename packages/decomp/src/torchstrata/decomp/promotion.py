"""PyTorch's type promotion, on metadata: which dtype an elementwise op produces.

Operands are tensors (:class:`~torchstrata.core.TensorMeta` or nodes carrying one) or
Python numbers. As in ``torch.result_type``, three groups are promoted separately and
then combined by category (bool < integer < floating < complex):

* tensors with at least one dimension,
* zero-dimensional tensors,
* Python numbers ("wrapped" scalars: ``bool``, ``int`` -> int64, ``float`` -> the
  default dtype, ``complex`` -> the default complex dtype).

A higher group's dtype wins unless a lower group belongs to a higher category: then
the two are promoted (``i32[4] + 2.5`` is ``f32``; ``f16[4] + f64[]`` is ``f16``).
"""

from __future__ import annotations

import enum
from typing import Any

import torch

from torchstrata.core import Node, TensorMeta

#: Dtypes whose elementwise math eager computes in float32 ("opmath") and rounds once.
LOW_PRECISION = frozenset({torch.float16, torch.bfloat16})

#: The complex dtype each float dtype pairs with. Asked of torch itself because it changes
#: between releases (torch 2.14 pairs bfloat16 with its new ``bcomplex32``).
_TO_COMPLEX = {
    dtype: torch.result_type(torch.empty(1, dtype=dtype, device="meta"), 1j)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
}


class Promotion(enum.Enum):
    """How an op derives its result dtype from the promoted operand dtype."""

    #: the promoted dtype (``add``, ``mul``, ``where``, ``maximum``...).
    DEFAULT = "default"
    #: integers and bool become the default float dtype (``div``, ``exp``, ``sigmoid``...).
    INT_TO_FLOAT = "int_to_float"
    #: bool (comparisons); operands are still compared in the promoted dtype.
    ALWAYS_BOOL = "always_bool"


def is_integral(dtype: torch.dtype) -> bool:
    """True for integer dtypes and bool."""
    return not dtype.is_floating_point and not dtype.is_complex


def operand_meta(value: Any) -> TensorMeta | None:
    """The tensor metadata of a node or meta, or None for a Python number."""
    if isinstance(value, Node):
        return value.tensor_meta
    if isinstance(value, TensorMeta):
        return value
    return None


def _scalar_dtype(value: Any) -> torch.dtype:
    # a symbolic size (``8*s77``, a mean's count over a symbolic dim) promotes as the
    # Python number it stands for: the graph keeps it symbolic (decision 0280)
    if isinstance(value, bool | torch.SymBool):
        return torch.bool
    if isinstance(value, int | torch.SymInt):
        return torch.int64
    if isinstance(value, float | torch.SymFloat):
        return torch.get_default_dtype()
    if isinstance(value, complex):
        return _TO_COMPLEX[torch.get_default_dtype()]
    raise TypeError(f"{value!r} is neither a tensor nor a Python number")


def _promote(current: torch.dtype | None, dtype: torch.dtype) -> torch.dtype:
    return dtype if current is None else torch.promote_types(current, dtype)


def _combine(higher: torch.dtype | None, lower: torch.dtype | None) -> torch.dtype | None:
    # c10's combine_categories: the higher group wins within its category.
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_complex:
        return higher
    if lower.is_complex:
        return _TO_COMPLEX.get(higher, lower) if higher.is_floating_point else lower
    if higher.is_floating_point:
        return higher
    if higher is torch.bool or lower.is_floating_point:
        return torch.promote_types(higher, lower)
    return higher


def result_type(*operands: Any) -> torch.dtype:
    """The dtype ``torch.result_type`` gives for these operands (tensors or numbers)."""
    dimensioned = zero_dim = wrapped = None
    for value in operands:
        meta = operand_meta(value)
        if meta is None:
            wrapped = _promote(wrapped, _scalar_dtype(value))
        elif meta.ndim:
            dimensioned = _promote(dimensioned, meta.dtype)
        else:
            zero_dim = _promote(zero_dim, meta.dtype)
    dtype = _combine(dimensioned, _combine(zero_dim, wrapped))
    if dtype is None:
        raise TypeError("type promotion needs at least one operand")
    return dtype


def promoted_dtypes(
    *operands: Any, kind: Promotion = Promotion.DEFAULT
) -> tuple[torch.dtype, torch.dtype]:
    """``(common, result)``: the dtype operands are computed in, and the op's result dtype.

    For ``INT_TO_FLOAT`` an integral common dtype becomes the default float dtype (so
    ``i64 / i64`` divides in float32); for ``ALWAYS_BOOL`` the result is bool.
    """
    common = result_type(*operands)
    if kind is Promotion.INT_TO_FLOAT and is_integral(common):
        common = torch.get_default_dtype()
    result = torch.bool if kind is Promotion.ALWAYS_BOOL else common
    return common, result


def computation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype eager does elementwise math in: float32 for float16/bfloat16."""
    return torch.float32 if dtype in LOW_PRECISION else dtype
