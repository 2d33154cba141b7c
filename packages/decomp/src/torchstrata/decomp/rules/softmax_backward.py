"""Backward of softmax and log-softmax (``_softmax_backward_data``, ``_log_softmax_backward_data``)."""

from __future__ import annotations

import torch

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext, canonical_dim
from torchstrata.decomp.promotion import computation_dtype
from torchstrata.decomp.table import RuleTable


def _prepare(ctx: DecompContext, grad: Node, out: Node, dim: int) -> tuple[Node, Node, list[int]]:
    compute = computation_dtype(grad.tensor_meta.dtype)
    shape = grad.tensor_meta.shape
    dims = [canonical_dim(dim, len(shape))] if shape else []
    return ctx.cast(grad, compute), ctx.cast(out, compute), dims


def softmax_backward(
    ctx: DecompContext, grad: Node, out: Node, dim: int, input_dtype: torch.dtype
) -> Node:
    """``out * (grad - sum(grad * out, dim))``."""
    g, y, dims = _prepare(ctx, grad, out, dim)
    shape = grad.tensor_meta.shape
    total = ctx.broadcast_reduced(ctx.prim("sum", ctx.prim("mul", g, y), dims), dims, shape)
    result = ctx.prim("mul", y, ctx.prim("sub", g, total))
    return ctx.cast(result, ctx.out_meta.dtype)


def log_softmax_backward(
    ctx: DecompContext, grad: Node, out: Node, dim: int, input_dtype: torch.dtype
) -> Node:
    """``grad - exp(out) * sum(grad, dim)``."""
    g, y, dims = _prepare(ctx, grad, out, dim)
    shape = grad.tensor_meta.shape
    total = ctx.broadcast_reduced(ctx.prim("sum", g, dims), dims, shape)
    result = ctx.prim("sub", g, ctx.prim("mul", ctx.prim("exp", y), total))
    return ctx.cast(result, ctx.out_meta.dtype)


RULES = RuleTable(
    {
        "aten._softmax_backward_data.default": softmax_backward,
        "aten._log_softmax_backward_data.default": log_softmax_backward,
    }
)
