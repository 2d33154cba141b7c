"""Scalar arguments that eager's kernels refuse to convert.

``x.fill_(1e39)`` on a bfloat16 tensor, ``torch.full_like(x, 3.4e38)``, ``masked_fill``
with ``-1e9`` on float16, ``clamp(max=1e39)``: eager raises *value cannot be converted
to type ... without overflow*, because these kernels convert their Scalar arguments to
the tensor's dtype (or to float) with a checked conversion. Meta and fake kernels never
convert, and a generated kernel would round the constant to infinity: a number where
eager raises. Other ops (``x + 1e39``, ``torch.where(c, x, 1e39)``) convert unchecked and
give infinity in eager too.

Which ops check, and into which type, is each kernel's own choice. So a Scalar that is
out of range for a dtype of the call is tried on ATen's CPU kernel, with every tensor
argument cut to at most two elements per dimension: where that raises the overflow, the
trace raises it too (the runtime then runs the function eagerly, which raises the
user's error). In-range Scalars, by far the usual case, cost one table lookup per op.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

__all__ = ["check_scalar_arguments"]

#: The message of ATen's checked conversion (c10/util/TypeCast.h).
_OVERFLOW = "without overflow"

#: Per op, the positions and names of its Scalar (``number``) arguments.
_SCALAR_ARGUMENTS: dict[torch._ops.OpOverload, tuple[tuple[int, str], ...]] = {}


def check_scalar_arguments(
    func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> None:
    """Raise eager's overflow error where ``func``'s CPU kernel would raise it for the
    Scalar arguments of this call.

    :raises RuntimeError: *value cannot be converted to type ... without overflow*.
    """
    positions = _SCALAR_ARGUMENTS.get(func)
    if positions is None:
        positions = _SCALAR_ARGUMENTS.setdefault(func, _scalar_positions(func))
    if not positions:
        return
    values = [args[index] if index < len(args) else kwargs.get(name) for index, name in positions]
    dtypes = _dtypes(args, kwargs)
    if not any(_out_of_range(value, dtype) for value in values for dtype in dtypes):
        return
    try:
        with _disable_current_modes(), torch.no_grad():
            func(*_probe_arguments(func, args), **_probe(dict(kwargs)))
    except RuntimeError as error:
        if _OVERFLOW in str(error):
            raise RuntimeError(str(error).splitlines()[0]) from None
    except Exception:  # noqa: BLE001 - the probe's shapes were not the op's: no answer
        return


def _scalar_positions(func: torch._ops.OpOverload) -> tuple[tuple[int, str], ...]:
    found = []
    for index, argument in enumerate(func._schema.arguments):
        kind = argument.type
        if isinstance(kind, torch.OptionalType):
            kind = kind.getElementType()
        if isinstance(kind, torch.NumberType):
            found.append((index, argument.name))
    return tuple(found)


def _dtypes(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> set[torch.dtype]:
    """The dtypes a Scalar of this call may be converted to: its tensors', an explicit
    ``dtype``, float32 (ATen's opmath type for reduced floating types) and, for factory
    calls without one, the default dtype."""
    found = {torch.float32, torch.get_default_dtype()}
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            found.add(value.dtype)
        elif isinstance(value, torch.dtype):
            found.add(value)
    return found


def _out_of_range(value: Any, dtype: torch.dtype) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False  # symbolic, complex or absent: nothing to decide here
    if dtype.is_floating_point:
        return math.isfinite(value) and abs(value) > torch.finfo(dtype).max
    if dtype.is_complex or dtype == torch.bool:
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return True
    info = torch.iinfo(dtype)
    return not info.min <= value <= info.max


def _probe_arguments(func: torch._ops.OpOverload, args: tuple[Any, ...]) -> list[Any]:
    """The positional arguments, probed; a factory's ``size`` cut as the tensors'
    shapes are."""
    names = [argument.name for argument in func._schema.arguments]
    probed = []
    for index, value in enumerate(args):
        if index < len(names) and names[index] == "size" and isinstance(value, list | tuple):
            probed.append([_cut(size) for size in value])
        else:
            probed.append(_probe(value))
    return probed


def _probe(value: Any) -> Any:
    """``value`` with each tensor a zero CPU tensor of at most two elements per
    dimension (broadcasts and index arguments stay valid)."""
    if isinstance(value, torch.Tensor):
        shape = [_cut(size) for size in value.shape]
        return torch.zeros(shape, dtype=value.dtype)
    if isinstance(value, dict):
        return {key: _probe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_probe(item) for item in value)
    if isinstance(value, torch.device):
        return torch.device("cpu")
    return value


def _cut(size: Any) -> int:
    """At most two: one element takes other paths in some kernels (``fill_`` copies a
    one-element tensor unchecked), as it does in eager. A symbolic size is never
    compared: that would add a guard to the shape environment."""
    return min(size, 2) if isinstance(size, int) else 2
