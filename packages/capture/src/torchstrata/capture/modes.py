"""What active ``with`` regions (grad mode, autocast) do to the ops traced inside them.

An autocast region's casts are chosen by :mod:`.autocast` (checked against autocast
itself); :data:`LOWER_PRECISION_OPS` only says which cast to try first. The autocast
in force when the function is called counts as a region around all of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from torchstrata.capture.autocast import AutocastMismatch, Region, autocast_arguments
from torchstrata.capture.variables import SequenceVar, TensorVar, Var
from torchstrata.core import OpKind, OpRef, enabled_autocast

if TYPE_CHECKING:  # only for annotations: the tracer imports this module
    from torchstrata.capture.tracer import Tracer

#: Ops autocast runs in its lower-precision dtype (by the last part of their name).
LOWER_PRECISION_OPS = frozenset(
    {"linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "conv1d", "conv2d",
     "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu",
     "scaled_dot_product_attention"}
)  # fmt: skip

DETACH = OpRef(OpKind.TORCH, "torch.Tensor.detach")


def grad_enabled(tracer: Tracer) -> bool:
    """Grad mode where the tracer is now."""
    for kind, value in reversed(tracer.modes):
        if kind == "grad":
            return bool(value)
    return torch.is_grad_enabled()


def autocast_region(tracer: Tracer) -> Region | None:
    """The innermost autocast region where the tracer is now: (device type, dtype), or
    None outside any or inside a disabled one. Outside every traced region it is the
    autocast the function is called under (the runtime then runs the graph with
    autocast off: its casts are in it); one device type at most (several raise
    :class:`~torchstrata.capture.autocast.AutocastMismatch`)."""
    for kind, value in reversed(tracer.modes):
        if kind == "autocast":
            return value
    ambient = enabled_autocast()
    if len(ambient) > 1:
        raise AutocastMismatch(f"autocast is enabled for several device types {ambient}")
    return ambient[0] if ambient else None


def apply_modes(
    tracer: Tracer, op: OpRef, args: tuple[Var, ...], kwargs: Mapping[str, Var]
) -> tuple[Var, ...]:
    """The arguments of ``op`` as the active ``with`` regions make it see them (raises
    :class:`~torchstrata.capture.autocast.AutocastMismatch`, see there)."""
    if not grad_enabled(tracer):
        args = tuple(_map_tensors(arg, lambda t: _detach(tracer, t)) for arg in args)
    region = autocast_region(tracer)
    if region is not None:
        lower = op.name.rsplit(".", 1)[-1] in LOWER_PRECISION_OPS
        args = autocast_arguments(tracer, op, args, kwargs, region, lower)
    return args


def _map_tensors(var: Var, fn: Any) -> Var:
    if isinstance(var, TensorVar):
        return fn(var)
    if isinstance(var, SequenceVar):
        return SequenceVar([_map_tensors(item, fn) for item in var.items], var.is_list)
    return var


def _detach(tracer: Tracer, var: TensorVar) -> Var:
    if not var.meta.requires_grad:
        return var
    return tracer.call_op(DETACH, (var,), {})
