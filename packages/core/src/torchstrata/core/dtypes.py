"""Short dtype names used by the text form of the IR (``f32``, ``bf16``, ``i64``, ``b8``...)."""

from __future__ import annotations

import torch

_SHORT_NAMES: dict[torch.dtype, str] = {
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float32: "f32",
    torch.float64: "f64",
    torch.int8: "i8",
    torch.int16: "i16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.uint8: "u8",
    torch.bool: "b8",
    torch.complex64: "c64",
    torch.complex128: "c128",
}
_BY_SHORT_NAME = {name: dtype for dtype, name in _SHORT_NAMES.items()}


def dtype_short_name(dtype: torch.dtype) -> str:
    """Return the short name of ``dtype`` (``torch.float32`` -> ``"f32"``)."""
    try:
        return _SHORT_NAMES[dtype]
    except KeyError:
        raise ValueError(f"dtype {dtype} has no short name in the torchstrata IR") from None


def dtype_from_short_name(name: str) -> torch.dtype:
    """Inverse of :func:`dtype_short_name`."""
    try:
        return _BY_SHORT_NAME[name]
    except KeyError:
        known = ", ".join(sorted(_BY_SHORT_NAME))
        raise ValueError(f"unknown dtype short name {name!r}; known: {known}") from None


def is_float(dtype: torch.dtype) -> bool:
    """True for floating-point dtypes (not complex)."""
    return dtype.is_floating_point


def is_integer(dtype: torch.dtype) -> bool:
    """True for integer dtypes, bool excluded."""
    return not dtype.is_floating_point and not dtype.is_complex and dtype is not torch.bool
