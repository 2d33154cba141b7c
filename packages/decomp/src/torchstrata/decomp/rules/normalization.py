"""Softmax, log-softmax and layer norm, numerically stable, computed like eager.

float16/bfloat16 inputs are computed in float32 and rounded once at the end.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext, canonical_dim
from torchstrata.decomp.promotion import computation_dtype
from torchstrata.decomp.table import NotDecomposable, RuleTable


def _shifted(ctx: DecompContext, x: Node, dim: int) -> tuple[Node, list[int]]:
    """``x - amax(x, dim)`` in the computation dtype, and the reduced dims."""
    shape = x.tensor_meta.shape
    dims = [canonical_dim(dim, len(shape))] if shape else []
    xc = ctx.cast(x, computation_dtype(x.tensor_meta.dtype))
    peak = ctx.broadcast_reduced(ctx.prim("amax", xc, dims), dims, shape)
    return ctx.prim("sub", xc, peak), dims


def _out_dtype(x: Node, half_to_float: bool) -> torch.dtype:
    dtype = x.tensor_meta.dtype
    if not dtype.is_floating_point:
        raise NotDecomposable(f"softmax of {dtype}")
    return torch.float32 if half_to_float and dtype is torch.float16 else dtype


def softmax(ctx: DecompContext, x: Node, dim: int, half_to_float: bool = False) -> Node:
    """``exp(x - max) / sum(exp(x - max))`` over ``dim``."""
    out_dtype = _out_dtype(x, half_to_float)
    shape = x.tensor_meta.shape
    shifted, dims = _shifted(ctx, x, dim)
    exps = ctx.prim("exp", shifted)
    total = ctx.broadcast_reduced(ctx.prim("sum", exps, dims), dims, shape)
    return ctx.cast(ctx.prim("div", exps, total), out_dtype)


def log_softmax(ctx: DecompContext, x: Node, dim: int, half_to_float: bool = False) -> Node:
    """``(x - max) - log(sum(exp(x - max)))`` over ``dim``."""
    out_dtype = _out_dtype(x, half_to_float)
    shape = x.tensor_meta.shape
    shifted, dims = _shifted(ctx, x, dim)
    total = ctx.prim("sum", ctx.prim("exp", shifted), dims)
    log_total = ctx.broadcast_reduced(ctx.prim("log", total), dims, shape)
    return ctx.cast(ctx.prim("sub", shifted, log_total), out_dtype)


def softmax_int(ctx: DecompContext, x: Node, dim: int, dtype: torch.dtype | None = None) -> Node:
    """``aten.softmax.int``: cast to ``dtype`` first, then :func:`softmax`."""
    return softmax(ctx, ctx.cast(x, dtype) if dtype else x, dim)


def log_softmax_int(
    ctx: DecompContext, x: Node, dim: int, dtype: torch.dtype | None = None
) -> Node:
    """``aten.log_softmax.int``: cast to ``dtype`` first, then :func:`log_softmax`."""
    return log_softmax(ctx, ctx.cast(x, dtype) if dtype else x, dim)


def native_layer_norm(
    ctx: DecompContext,
    x: Node,
    normalized_shape: Sequence[int],
    weight: Node | None,
    bias: Node | None,
    eps: float,
) -> tuple[Node, Node, Node]:
    """``(out, mean, rstd)`` over the trailing ``normalized_shape`` dims (biased variance).

    ``mean`` and ``rstd`` keep the reduced dims as size 1, like eager. Their dtype for
    float16/bfloat16 inputs differs between eager's kernels: the CPU kernel returns the
    input dtype, CUDA (and the meta function) float32; we follow the kernel of the device.
    """
    shape = x.tensor_meta.shape
    dims = list(range(len(shape) - len(normalized_shape), len(shape)))
    count = ctx.numel(shape, dims)
    xc = ctx.cast(x, computation_dtype(x.tensor_meta.dtype))
    avg = ctx.prim("div", ctx.prim("sum", xc, dims), ctx.count(count))
    centered = ctx.prim("sub", xc, ctx.broadcast_reduced(avg, dims, shape))
    variance = ctx.prim(
        "div", ctx.prim("sum", ctx.prim("mul", centered, centered), dims), ctx.count(count)
    )
    rstd = ctx.prim("rsqrt", ctx.prim("add", variance, float(eps)))
    out = ctx.prim("mul", centered, ctx.broadcast_reduced(rstd, dims, shape))
    compute = xc.tensor_meta.dtype
    if weight is not None:
        out = ctx.prim("mul", out, ctx.broadcast_to(ctx.cast(weight, compute), shape))
    if bias is not None:
        out = ctx.prim("add", out, ctx.broadcast_to(ctx.cast(bias, compute), shape))
    dtype = x.tensor_meta.dtype
    stats_dtype = dtype if x.tensor_meta.device.type == "cpu" else compute
    avg, rstd = ctx.keepdim(avg, dims, shape), ctx.keepdim(rstd, dims, shape)
    return ctx.cast(out, dtype), ctx.cast(avg, stats_dtype), ctx.cast(rstd, stats_dtype)


def safe_softmax(ctx: DecompContext, x: Node, dim: int, dtype: torch.dtype | None = None) -> Node:
    """:func:`softmax`, but 0 (not NaN) on slices that are all ``-inf``."""
    x = ctx.cast(x, dtype) if dtype else x
    out = softmax(ctx, x, dim)
    shape = x.tensor_meta.shape
    dims = [canonical_dim(dim, len(shape))] if shape else []
    masked = ctx.cast(ctx.prim("eq", x, float("-inf")), torch.uint8)
    all_masked = ctx.prim("ne", ctx.prim("amin", masked, dims), 0)
    return ctx.where(ctx.broadcast_reduced(all_masked, dims, shape), 0.0, out)


RULES = RuleTable(
    {
        "aten._softmax.default": softmax,
        "aten._log_softmax.default": log_softmax,
        "aten.softmax.int": softmax_int,
        "aten.log_softmax.int": log_softmax_int,
        "aten._safe_softmax.default": safe_softmax,
        "aten.native_layer_norm.default": native_layer_norm,
    }
)
