"""The meta rules of the prims: each prim's result metadata from its operands' (shapes,
dtypes, strides), with the checks that name a bad operand."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchstrata.core.meta import TensorMeta, broadcast_strides
from torchstrata.core.prim_errors import PrimError


def _complex_value(value: Any) -> str | None:
    """A description of the first complex tensor, dtype or number in ``value``, if any."""
    if isinstance(value, TensorMeta):
        return f"a {value.dtype} tensor" if value.dtype.is_complex else None
    if isinstance(value, torch.dtype):
        return f"dtype {value}" if value.is_complex else None
    if isinstance(value, complex):
        return f"the complex number {value!r}"
    if isinstance(value, list | tuple):
        for item in value:
            found = _complex_value(item)
            if found is not None:
                return found
    return None


def real_only(name: str, meta: Callable[..., TensorMeta]) -> Callable[..., TensorMeta]:
    """``meta`` refusing complex operands, dtypes and numbers: prims are real-valued (no
    backend computes complex arithmetic), so complex values stay ATen calls."""

    def checked(*args: Any, **kwargs: Any) -> TensorMeta:
        found = _complex_value(args) or _complex_value(tuple(kwargs.values()))
        if found is not None:
            raise PrimError(
                f"prims.{name} takes real values, got {found}: prims are real-valued, "
                "complex values stay ATen calls (docs/decisions/0070-complex-stays-aten.md)"
            )
        return meta(*args, **kwargs)

    checked.__doc__ = meta.__doc__
    return checked


Operand = TensorMeta | int | float | bool


def _tensor_operands(name: str, operands: Sequence[Any]) -> list[TensorMeta]:
    tensors = [op for op in operands if isinstance(op, TensorMeta)]
    if not tensors:
        raise PrimError(f"prims.{name} needs at least one tensor operand")
    first = tensors[0]
    for other in tensors[1:]:
        if other.shape != first.shape:
            raise PrimError(
                f"prims.{name}: shapes {first.shape} and {other.shape} differ "
                "(broadcast explicitly with prims.broadcast_in_dim)"
            )
        if other.dtype != first.dtype:
            raise PrimError(
                f"prims.{name}: dtypes {first.dtype} and {other.dtype} differ "
                "(cast explicitly with prims.convert_element_type)"
            )
        if other.device != first.device:
            raise PrimError(f"prims.{name}: devices {first.device} and {other.device} differ")
    for op in operands:
        # a symbolic number (a count over a symbolic dim) is a number of a graph with
        # symbolic sizes, made a plain one with its sizes (decision 0280)
        if not isinstance(op, TensorMeta | int | float | bool | torch.SymInt | torch.SymFloat):
            raise PrimError(f"prims.{name}: operand {op!r} is neither a tensor nor a number")
    return tensors


def elementwise_meta(name: str, dtype_rule: str) -> Callable[..., TensorMeta]:
    def meta(*operands: Any) -> TensorMeta:
        first = _tensor_operands(name, operands)[0]
        if dtype_rule == "float" and not first.dtype.is_floating_point:
            raise PrimError(f"prims.{name} takes floating-point tensors, got {first.dtype}")
        if dtype_rule == "int" and (first.dtype.is_floating_point or first.dtype.is_complex):
            raise PrimError(f"prims.{name} takes integer or bool tensors, got {first.dtype}")
        dtype = torch.bool if dtype_rule == "bool" else first.dtype
        return TensorMeta(first.shape, dtype, first.device)

    return meta


def where_meta(pred: Any, a: Any, b: Any) -> TensorMeta:
    if not isinstance(pred, TensorMeta) or pred.dtype is not torch.bool:
        raise PrimError("prims.where needs a bool tensor predicate")
    values = (
        _tensor_operands("where", [a, b])
        if isinstance(a, TensorMeta) or isinstance(b, TensorMeta)
        else []
    )
    if values and values[0].shape != pred.shape:
        raise PrimError(f"prims.where: predicate shape {pred.shape} differs from {values[0].shape}")
    if not values:
        raise PrimError("prims.where needs at least one tensor value operand")
    return TensorMeta(pred.shape, values[0].dtype, pred.device)


def convert_meta(a: TensorMeta, dtype: torch.dtype) -> TensorMeta:
    if not isinstance(dtype, torch.dtype):
        raise PrimError(f"prims.convert_element_type: {dtype!r} is not a dtype")
    return TensorMeta(a.shape, dtype, a.device)


def _check_dims(name: str, a: TensorMeta, dims: Sequence[int]) -> tuple[int, ...]:
    dims = tuple(dims)
    if any(not 0 <= d < a.ndim for d in dims) or len(set(dims)) != len(dims):
        raise PrimError(
            f"prims.{name}: dims {dims} invalid for rank {a.ndim} (use non-negative, distinct dims)"
        )
    return dims


def reduction_meta(name: str) -> Callable[..., TensorMeta]:
    def meta(a: TensorMeta, dims: Sequence[int]) -> TensorMeta:
        reduced = set(_check_dims(name, a, dims))
        if a.dtype is torch.bool:
            raise PrimError(f"prims.{name} does not reduce bool tensors; cast first")
        shape = tuple(s for i, s in enumerate(a.shape) if i not in reduced)
        return TensorMeta(shape, a.dtype, a.device)

    return meta


def broadcast_in_dim_meta(
    a: TensorMeta, shape: Sequence[int], broadcast_dims: Sequence[int]
) -> TensorMeta:
    shape, broadcast_dims = tuple(shape), tuple(broadcast_dims)
    if len(broadcast_dims) != a.ndim:
        raise PrimError(
            f"prims.broadcast_in_dim: {len(broadcast_dims)} broadcast dims for rank {a.ndim}"
        )
    if list(broadcast_dims) != sorted(set(broadcast_dims)) or any(
        not 0 <= d < len(shape) for d in broadcast_dims
    ):
        raise PrimError(
            f"prims.broadcast_in_dim: broadcast dims {broadcast_dims} must increase within rank {len(shape)}"
        )
    for in_dim, out_dim in enumerate(broadcast_dims):
        if a.shape[in_dim] not in (1, shape[out_dim]):
            raise PrimError(
                f"prims.broadcast_in_dim: cannot broadcast size {a.shape[in_dim]} to {shape[out_dim]}"
            )
    strides = broadcast_strides(a.shape, a.strides, shape, broadcast_dims)
    return TensorMeta(shape, a.dtype, a.device, strides)


def broadcast_in_dim(
    a: torch.Tensor, shape: Sequence[int], broadcast_dims: Sequence[int]
) -> torch.Tensor:
    # the new dimensions as ``unsqueeze`` makes them (see meta.broadcast_strides)
    kept = set(broadcast_dims)
    for out_dim in range(len(shape)):
        if out_dim not in kept:
            a = a.unsqueeze(out_dim)
    return a.expand(tuple(shape))


def reshape_meta(a: TensorMeta, shape: Sequence[int]) -> TensorMeta:
    shape = tuple(shape)
    if math.prod(shape) != a.numel or any(s < 0 for s in shape):
        raise PrimError(f"prims.reshape: cannot reshape {a.shape} ({a.numel} elements) to {shape}")
    return TensorMeta(shape, a.dtype, a.device)


def permute_meta(a: TensorMeta, dims: Sequence[int]) -> TensorMeta:
    dims = tuple(dims)
    if sorted(dims) != list(range(a.ndim)):
        raise PrimError(f"prims.permute: {dims} is not a permutation of rank {a.ndim}")
    return TensorMeta(
        tuple(a.shape[d] for d in dims), a.dtype, a.device, tuple(a.strides[d] for d in dims)
    )


def slice_meta(
    a: TensorMeta, starts: Sequence[int], limits: Sequence[int], steps: Sequence[int]
) -> TensorMeta:
    if not len(starts) == len(limits) == len(steps) == a.ndim:
        raise PrimError("prims.slice needs one start, limit and step per dim")
    shape, strides = [], []
    for size, stride, start, limit, step in zip(
        a.shape, a.strides, starts, limits, steps, strict=True
    ):
        if not (0 <= start <= limit <= size) or step < 1:
            raise PrimError(f"prims.slice: [{start}:{limit}:{step}] out of range for size {size}")
        shape.append(max(0, (limit - start + step - 1) // step))
        strides.append(stride * step)
    return TensorMeta(tuple(shape), a.dtype, a.device, tuple(strides))


def slice_prim(
    a: torch.Tensor, starts: Sequence[int], limits: Sequence[int], steps: Sequence[int]
) -> torch.Tensor:
    index = tuple(slice(s, e, k) for s, e, k in zip(starts, limits, steps, strict=True))
    return a[index]


def as_strided_meta(
    a: TensorMeta, shape: Sequence[int], strides: Sequence[int], offset: int
) -> TensorMeta:
    if len(shape) != len(strides) or offset < 0:
        raise PrimError("prims.as_strided: shape and strides differ in length, or offset < 0")
    return TensorMeta(tuple(shape), a.dtype, a.device, tuple(strides))


def full_meta(
    shape: Sequence[int], value: Any, dtype: torch.dtype, device: torch.device
) -> TensorMeta:
    return TensorMeta(tuple(shape), dtype, device)


def iota_meta(
    length: int, start: int, step: int, dtype: torch.dtype, device: torch.device
) -> TensorMeta:
    if length < 0:
        raise PrimError("prims.iota: negative length")
    return TensorMeta((length,), dtype, device)
