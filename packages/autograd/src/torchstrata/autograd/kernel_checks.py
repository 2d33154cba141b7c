"""Errors eager's kernels raise where meta and fake kernels answer.

The trace runs ATen on meta or fake tensors. Their kernels compute shapes and dtypes
but skip some of the checks of the real kernels, so a graph could compile to numbers
where eager raises:

- **Scalars that do not convert.** ``x.fill_(1e39)`` on bfloat16,
  ``masked_fill(mask, -1e9)`` on float16, ``clamp(max=1e39)``, ``fill_(300)`` on
  uint8: *value cannot be converted to type ... without overflow*. A generated kernel
  would round the constant to infinity, or wrap it. (``x + 1e39`` converts unchecked
  and gives infinity in eager too; ``torch.where(c, x, 1e39)`` on float16 does so on
  the CPU, while CUDA's kernel refuses the 1e39.)
- **Scalars that integers refuse.** ``x ** -1`` and ``x // 0`` on integer tensors.
- **Dtypes a CPU kernel does not implement.** ``1 - mask`` (*Subtraction ... with a
  bool tensor is not supported*), ``clamp`` of a bool tensor (*not implemented for
  'Bool'*), ``argmax`` of one; ``x_int.mul_(1.5)`` (*result type Float can't be cast to
  the desired output type Long*).

Which op checks what is each kernel's own choice, so the real kernel answers: the call
is repeated on ATen's kernel for the trace's device with every tensor argument a tensor
of ones cut to at most two elements per dimension. Where that raises one of the errors
above, the trace raises it too, and the runtime runs the function eagerly, which raises
the user's error.

- The dtype question depends on the op and its arguments' dtypes only. It is asked
  once per process for each such signature of a CPU trace, and never for a GPU trace
  (CUDA kernels implement other dtypes).
- The value questions are asked only where a Scalar argument is out of range for a
  dtype of the call, or is zero or negative with an integer tensor. In-range Scalars,
  by far the usual case, cost a lookup. They are asked of the trace's device's kernel
  (the CPU's for a meta trace): the CPU and CUDA kernels of one op check differently.
- Random ops are never repeated: that would draw from the user's generator.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from torchstrata.autograd.python_calls import overload_calls_python

__all__ = ["check_like_eager_kernels"]

#: Messages of checks that depend on the Scalar arguments' values.
_VALUE_ERRORS = (
    "without overflow",  # c10's checked scalar conversion
    "ZeroDivisionError",
    "Integers to negative integer powers are not allowed",
)
#: Messages of checks that depend on the arguments' dtypes only.
_DTYPE_ERRORS = (
    "not implemented for '",  # AT_DISPATCH over the kernel's dtypes
    "with a bool tensor is not supported",
    "with two bool tensors is not supported",
    "on a bool tensor is not supported",
    "does not support bool input",  # argmax, argmin
    "can't be cast to the desired output type",  # x_int.mul_(1.5)
)

#: Per op, the positions and names of its arguments that may hold a Python number: its
#: Scalars, and its Tensors (``torch.div(x, 0, rounding_mode="floor")`` passes ``0``).
_SCALAR_ARGUMENTS: dict[torch._ops.OpOverload, tuple[tuple[int, str], ...]] = {}
#: The positions of a random op, which is never repeated.
_RANDOM: tuple[tuple[int, str], ...] = ((-1, ""),)
#: Per op and argument dtypes, the dtype error of the CPU kernel, or None.
_DTYPE_ANSWERS: dict[tuple[Any, ...], str | None] = {}


def check_like_eager_kernels(
    func: torch._ops.OpOverload,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    device: torch.device,
) -> None:
    """Raise the error ATen's kernel of ``func`` on ``device`` (the device the traced
    call computes on) raises for these arguments' dtypes (asked of CPU traces only) and
    Scalar values, where the trace's kernels do not. A ``meta`` device (a trace that
    stands for no device) asks the CPU's kernel the value questions only.

    :raises RuntimeError: with eager's message.
    """
    positions = _SCALAR_ARGUMENTS.get(func)
    if positions is None:
        positions = _SCALAR_ARGUMENTS.setdefault(func, _scalar_positions(func))
    if positions is _RANDOM or overload_calls_python(func):
        return  # a random op would draw from the user's generator; a hook would run
    if device.type == "meta":
        device = torch.device("cpu")
    elif device.type == "cpu":
        key = (func, *_signature(args), *_signature(tuple(kwargs.values())))
        if key not in _DTYPE_ANSWERS:
            _DTYPE_ANSWERS[key] = _probe_error(func, args, kwargs, _DTYPE_ERRORS, device)
        message = _DTYPE_ANSWERS[key]
        if message is not None:
            raise RuntimeError(message)
    if positions and _questionable_scalars(positions, args, kwargs):
        message = _probe_error(func, args, kwargs, _VALUE_ERRORS, device)
        if message is not None:
            raise RuntimeError(message)


def _signature(values: tuple[Any, ...]) -> list[Any]:
    """What the dtype question depends on: each tensor's dtype, each other value's type
    (a bool, int and float Scalar promote differently)."""
    return [value.dtype if isinstance(value, torch.Tensor) else type(value) for value in values]


def _questionable_scalars(
    positions: tuple[tuple[int, str], ...], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> bool:
    given: list[Any] = [
        args[index] if index < len(args) else kwargs.get(name) for index, name in positions
    ]
    values = [value for value in given if type(value) in (int, float)]
    sizes = [value for value in given if isinstance(value, torch.SymInt)]
    if not values and not sizes:
        return False
    dtypes = _dtypes(args, kwargs)
    return any(_questionable(value, dtype) for value in values for dtype in dtypes) or any(
        _questionable_size(size, dtype) for size in sizes for dtype in dtypes
    )


def _questionable_size(size: torch.SymInt, dtype: torch.dtype) -> bool:
    """Whether a symbolic size (at least 2) as a Scalar may be out of ``dtype``'s range.
    Where a size could be (``float16``, integer dtypes narrower than 64 bits) the
    comparison is a condition the symbolic trace records (decision 0220); a size never
    exceeds the wider dtypes, which are not asked (no condition)."""
    if dtype.is_complex or dtype == torch.bool:
        return False
    limit = torch.finfo(dtype).max if dtype.is_floating_point else torch.iinfo(dtype).max
    if limit >= 2**63 - 1:
        return False
    return bool(size > limit)


def _scalar_positions(func: torch._ops.OpOverload) -> tuple[tuple[int, str], ...]:
    if torch.Tag.nondeterministic_seeded in func.tags:
        return _RANDOM
    found = []
    for index, argument in enumerate(func._schema.arguments):
        kind = argument.type
        if isinstance(kind, torch.OptionalType):
            kind = kind.getElementType()
        if isinstance(kind, torch.NumberType | torch.TensorType):
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


def _questionable(value: float, dtype: torch.dtype) -> bool:
    """Whether a kernel may refuse Scalar ``value`` (a Python int or float, not a bool)
    for ``dtype``: out of its range, or zero or negative for an integer dtype (division,
    powers)."""
    if dtype.is_floating_point:
        return math.isfinite(value) and abs(value) > torch.finfo(dtype).max
    if dtype.is_complex:
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return True
    if value <= 0:
        return True
    if dtype == torch.bool:
        return False
    info = torch.iinfo(dtype)
    return not info.min <= value <= info.max


def _probe_error(
    func: torch._ops.OpOverload,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    messages: tuple[str, ...],
    device: torch.device,
) -> str | None:
    """The first line of the error the kernel on ``device`` raises on probe arguments,
    where it is one of ``messages``; None where it raises none of them."""
    try:
        with _disable_current_modes(), torch.no_grad():
            func(*_probe_arguments(func, args, device), **_probe(dict(kwargs), device))
    except (RuntimeError, ZeroDivisionError) as error:
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        if any(message in text for message in messages):
            return text
    except Exception:  # noqa: BLE001 - the probe's shapes were not the op's: no answer
        return None
    return None


def _probe_arguments(
    func: torch._ops.OpOverload, args: tuple[Any, ...], device: torch.device
) -> list[Any]:
    """The positional arguments, probed; a factory's ``size`` cut as the tensors'
    shapes are."""
    names = [argument.name for argument in func._schema.arguments]
    probed = []
    for index, value in enumerate(args):
        if index < len(names) and names[index] == "size" and isinstance(value, list | tuple):
            probed.append([_cut(size) for size in value])
        else:
            probed.append(_probe(value, device))
    return probed


def _probe(value: Any, device: torch.device) -> Any:
    """``value`` with each tensor a tensor of ones on ``device``, of at most two elements
    per dimension (broadcasts stay valid; ones divide without error and index in range).
    A 0-dim CPU tensor stays on the CPU: a wrapped Python number (``torch.where(c, x,
    1e39)``) is one, and CUDA kernels read it as a host Scalar."""
    if isinstance(value, torch.Tensor):
        where = value.device if value.dim() == 0 and value.device.type == "cpu" else device
        return torch.ones([_cut(size) for size in value.shape], dtype=value.dtype, device=where)
    if isinstance(value, dict):
        return {key: _probe(item, device) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_probe(item, device) for item in value)
    if isinstance(value, torch.device):
        return device
    if isinstance(value, torch.SymInt | torch.SymFloat):
        # a symbolic size: the dtype question asks its type; a value question is asked
        # only under a recorded condition (``_questionable_size``) that the hint meets
        return type(value.node.hint)(value.node.hint) if value.node.hint is not None else value
    return value


def _cut(size: Any) -> int:
    """At most two: one element takes other paths in some kernels (``fill_`` copies a
    one-element tensor unchecked), as it does in eager. A symbolic size is never
    compared: that would add a guard to the shape environment."""
    return min(size, 2) if isinstance(size, int) else 2
