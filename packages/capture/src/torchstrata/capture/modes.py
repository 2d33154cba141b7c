"""What active ``with`` regions (grad mode, autocast) do to the ops traced inside them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from torchstrata.capture.variables import ConstVar, SequenceVar, TensorVar, Var
from torchstrata.core import OpKind, OpRef

if TYPE_CHECKING:  # only for annotations: the tracer imports this module
    from torchstrata.capture.tracer import Tracer

#: Ops autocast runs in its lower-precision dtype (by the last part of their name).
LOWER_PRECISION_OPS = frozenset(
    {"linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "conv1d", "conv2d",
     "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu",
     "scaled_dot_product_attention"}
)  # fmt: skip

DETACH = OpRef(OpKind.TORCH, "torch.Tensor.detach")
CAST = OpRef(OpKind.TORCH, "torch.Tensor.to")


def grad_enabled(tracer: Tracer) -> bool:
    """Grad mode where the tracer is now."""
    for kind, value in reversed(tracer.modes):
        if kind == "grad":
            return bool(value)
    return torch.is_grad_enabled()


def apply_modes(tracer: Tracer, op: OpRef, args: tuple[Var, ...]) -> tuple[Var, ...]:
    """The arguments of ``op`` as the active ``with`` regions make it see them."""
    if not grad_enabled(tracer):
        args = tuple(_map_tensors(arg, lambda t: _detach(tracer, t)) for arg in args)
    dtype = None
    for kind, value in reversed(tracer.modes):
        if kind == "autocast":
            dtype = value
            break
    if dtype is not None and op.name.rsplit(".", 1)[-1] in LOWER_PRECISION_OPS:
        args = tuple(_map_tensors(arg, lambda t: _cast(tracer, t, dtype)) for arg in args)
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


def _cast(tracer: Tracer, var: TensorVar, dtype: torch.dtype) -> Var:
    if not var.meta.dtype.is_floating_point or var.meta.dtype == dtype:
        return var
    return tracer.call_op(CAST, (var, ConstVar(dtype)), {})
