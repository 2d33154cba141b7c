"""Guards spelled as Python conditions: one spelling per :class:`GuardKind`, shared by
the runtime's cache-entry checks and capture's checks of the segments after a graph
break (each generates one function from these texts).

A condition reads the guarded value from a variable, and the objects it compares with
from names that ``constant`` registers in the generated function's namespace.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from torchstrata.core.meta import TensorMeta, TensorTraits
from torchstrata.core.results import TENSOR_TYPES, Guard, GuardKind

_CPU = torch.device("cpu")

#: ``constant(value)``: the name under which the generated function sees ``value``.
Constant = Callable[[Any], str]


def guard_condition(guard: Guard, var: str, constant: Constant) -> str:
    """``guard`` as a condition on the variable ``var`` (its source's value)."""
    kind, expected = guard.kind, guard.expected
    if kind is GuardKind.TENSOR_MATCH:
        return _tensor_condition(var, expected, constant)
    if kind is GuardKind.CONSTANT_MATCH:
        return constant_condition(var, expected, constant)
    if kind is GuardKind.ID_MATCH:
        referent = guard.referent
        if referent is not None and id(referent) == expected:  # held: cheaper than id()
            return f"{var} is {constant(referent)}"
        return f"id({var}) == {constant(expected)}"
    if kind is GuardKind.TYPE_MATCH:
        return f"type({var}) is {constant(expected)}"
    if kind is GuardKind.ABSENT_KEY:
        return f"{constant(expected)} not in {var}"
    if kind is GuardKind.GLOBAL_STATE:
        # one tuple compared in C: its items are bools, dtypes, ints and small tuples
        return f"{var} == {constant(expected)}"
    raise ValueError(f"unknown guard kind {kind!r}")


def _tensor_condition(var: str, expected: Any, constant: Constant) -> str:
    types = constant(TENSOR_TYPES)
    # Exact types: a tensor subclass (its __torch_function__ or dispatch) would run the
    # graph traced for a plain tensor; the capture refuses subclasses, so one fails the
    # guard and runs eagerly.
    if isinstance(expected, TensorTraits):
        # a tensor of sizes and strides checked elsewhere (a symbolic entry's SizeCheck)
        return f"type({var}) in {types} and " + _traits_condition(var, expected, constant)
    if not isinstance(expected, TensorMeta):
        return f"type({var}) in {types}"
    return (
        f"type({var}) in {types} and {var}.shape == {constant(torch.Size(expected.shape))}"
        f" and {var}.dtype is {constant(expected.dtype)}"
        f" and {var}.stride() == {constant(tuple(expected.strides))} and "
        + _traits_condition(var, TensorTraits.of(expected), constant, dtype=False)
    )


def _traits_condition(
    var: str, expected: TensorTraits, constant: Constant, dtype: bool = True
) -> str:
    """The dtype (unless ``dtype`` is False: checked already), device, ``requires_grad``
    and lazy bits of the tensor ``var``."""
    if expected.device == _CPU:
        device_check = f"{var}.is_cpu"  # the same test without making a device object
    else:
        device_check = f"{var}.device == {constant(expected.device)}"
    return (
        (f"{var}.dtype is {constant(expected.dtype)} and " if dtype else "")
        + f"{device_check} and {var}.requires_grad is {constant(bool(expected.requires_grad))}"
        + _lazy_bits_condition(var, expected.dtype)
    )


def _lazy_bits_condition(var: str, dtype: torch.dtype) -> str:
    """No lazy conjugate or negative bit (``z.conj()``, ``z.conj().imag``): graphs are
    traced, and kernels read memory, for tensors without them. Only complex tensors
    carry a conjugate bit, only floating and complex ones a negative bit."""
    if dtype.is_complex:
        return f" and not {var}.is_conj() and not {var}.is_neg()"
    if dtype.is_floating_point:
        return f" and not {var}.is_neg()"
    return ""


def constant_condition(var: str, expected: Any, constant: Constant) -> str:
    """``var`` is the constant ``expected``: ``None`` and bools by identity, others by
    type and ``==``, and the floats ``==`` cannot tell apart exactly: NaN (not equal to
    itself) and zero, each of either sign (a graph traced for ``0.0`` divides to ``inf``
    where ``-0.0`` gives ``-inf``; ``math.copysign(1.0, s)`` folds to ``1.0`` for NaN and
    to ``-1.0`` for ``-nan``)."""
    if expected is None or isinstance(expected, bool):
        return f"{var} is {constant(expected)}"
    if type(expected) is float and (math.isnan(expected) or expected == 0.0):
        same_class = f"{var} != {var}" if math.isnan(expected) else f"{var} == 0.0"
        sign = math.copysign(1.0, expected)
        copysign = constant(math.copysign)
        return f"type({var}) is float and {same_class} and {copysign}(1.0, {var}) == {sign!r}"
    return f"type({var}) is {constant(type(expected))} and {var} == {constant(expected)}"
