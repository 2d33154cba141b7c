"""Short dtype names used by the text form of the IR (``f32``, ``bf16``, ``i64``, ``b8``...),
and integer scalars as a dtype holds them."""

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


def wrapped_integer(value: int, dtype: torch.dtype) -> int:
    """``value`` as the integer ``dtype`` holds it, wrapped modulo 2**bits as ATen's
    scalar conversion and C++'s ``static_cast`` do: ``uint8_tensor < 300`` compares with
    44, ``uint8_tensor % 300`` divides by 44. (``torch.tensor(300, dtype=torch.uint8)``
    refuses; Triton refuses or widens such a constant.)"""
    bits = torch.iinfo(dtype).bits
    wrapped = value & ((1 << bits) - 1)
    if dtype.is_signed and wrapped >= 1 << (bits - 1):
        wrapped -= 1 << bits
    return wrapped
