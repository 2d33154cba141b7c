"""Reduction rules: sum, prod, cumsum, mean, amax/amin, var/var_mean/std.

prims reductions drop the reduced dims and keep the input dtype, so these rules pick
the accumulation dtype (float32 for float16/bfloat16, int64 for integer sums, like
eager), re-insert ``keepdim`` dims and cast the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext, canonical_dim, canonical_dims
from torchstrata.decomp.promotion import computation_dtype, is_integral
from torchstrata.decomp.table import NotDecomposable, RuleTable

Dims = int | Sequence[int] | None


def reduce(
    ctx: DecompContext, name: str, x: Node, dims: Dims, keepdim: bool, accumulate: torch.dtype
) -> Node:
    """``prims.<name>`` of ``x`` cast to ``accumulate`` over ``dims``, with ``keepdim``."""
    shape = x.tensor_meta.shape
    reduced = canonical_dims(dims, len(shape))
    out = ctx.prim(name, ctx.cast(x, accumulate), reduced)
    return ctx.keepdim(out, reduced, shape) if keepdim else out


def widened_dtype(x: Node, dtype: torch.dtype | None) -> torch.dtype:
    """The result dtype of sum/prod/cumsum: ``dtype`` if given, else int64 for integer and
    bool inputs (like eager), else the input's."""
    if dtype is not None:
        return dtype
    return torch.int64 if is_integral(x.tensor_meta.dtype) else x.tensor_meta.dtype


def sum_(
    ctx: DecompContext,
    x: Node,
    dim: Dims = None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> Node:
    """Sum over ``dim`` (all dims when None or empty); integers and bool sum to int64."""
    dtype = widened_dtype(x, dtype)
    x = ctx.cast(x, dtype)
    out = reduce(ctx, "sum", x, dim, keepdim, computation_dtype(dtype))
    return ctx.cast(out, dtype)


def sum_default(ctx: DecompContext, x: Node, *, dtype: torch.dtype | None = None) -> Node:
    """Sum of every element."""
    return sum_(ctx, x, None, False, dtype=dtype)


def prod(
    ctx: DecompContext,
    x: Node,
    dim: Any = None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> Node:
    """Product over ``dim``; integers and bool multiply in int64."""
    dtype = widened_dtype(x, dtype)
    x = ctx.cast(x, dtype)
    dims = None if dim is None else [canonical_dim(dim, x.tensor_meta.ndim)]
    return ctx.cast(reduce(ctx, "prod", x, dims, keepdim, computation_dtype(dtype)), dtype)


def prod_default(ctx: DecompContext, x: Node, *, dtype: torch.dtype | None = None) -> Node:
    """Product of every element."""
    return prod(ctx, x, None, False, dtype=dtype)


def cumsum(ctx: DecompContext, x: Node, dim: int, *, dtype: torch.dtype | None = None) -> Node:
    """``prims.cumsum``; integers and bool accumulate in int64, half types in float32."""
    dtype = widened_dtype(x, dtype)
    shape = x.tensor_meta.shape
    xc = ctx.cast(ctx.cast(x, dtype), computation_dtype(dtype))
    if not shape:
        return ctx.cast(xc, dtype)
    return ctx.cast(ctx.prim("cumsum", xc, canonical_dim(dim, len(shape))), dtype)


def mean(
    ctx: DecompContext,
    x: Node,
    dim: Dims = None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> Node:
    """``sum / count`` in the accumulation dtype."""
    dtype = dtype or x.tensor_meta.dtype
    if is_integral(dtype):
        raise NotDecomposable("mean of an integer dtype")
    x = ctx.cast(x, dtype)
    count = ctx.numel(x.tensor_meta.shape, canonical_dims(dim, x.tensor_meta.ndim))
    total = reduce(ctx, "sum", x, dim, keepdim, computation_dtype(dtype))
    return ctx.cast(ctx.prim("div", total, ctx.count(count)), dtype)


def mean_default(ctx: DecompContext, x: Node, *, dtype: torch.dtype | None = None) -> Node:
    """Mean of every element."""
    return mean(ctx, x, None, False, dtype=dtype)


def _extremum(name: str) -> Any:
    def rule(ctx: DecompContext, x: Node, dim: Dims = (), keepdim: bool = False) -> Node:
        dtype = x.tensor_meta.dtype
        accumulate = torch.uint8 if dtype is torch.bool else dtype
        return ctx.cast(reduce(ctx, name, x, dim, keepdim, accumulate), dtype)

    rule.__name__ = name
    rule.__doc__ = f"``prims.{name}`` (NaN-propagating); bool goes through uint8."
    return rule


def moments(
    ctx: DecompContext, x: Node, dim: Dims, correction: float | None, keepdim: bool
) -> tuple[Node, Node]:
    """``(var, mean)`` with ``correction`` (default 1), in the accumulation dtype."""
    dtype = x.tensor_meta.dtype
    if is_integral(dtype):
        raise NotDecomposable("var of an integer dtype")
    shape = x.tensor_meta.shape
    dims = canonical_dims(dim, len(shape))
    count = ctx.numel(shape, dims)
    xc = ctx.cast(x, computation_dtype(dtype))
    avg = ctx.prim("div", ctx.prim("sum", xc, dims), ctx.count(count))
    centered = ctx.prim("sub", xc, ctx.broadcast_reduced(avg, dims, shape))
    squares = ctx.prim("sum", ctx.prim("mul", centered, centered), dims)
    correction = 1 if correction is None else correction
    var = ctx.prim("div", squares, ctx.count(max(count - correction, 0)))
    if keepdim:
        var, avg = ctx.keepdim(var, dims, shape), ctx.keepdim(avg, dims, shape)
    return ctx.cast(var, dtype), ctx.cast(avg, dtype)


def var(
    ctx: DecompContext,
    x: Node,
    dim: Dims = None,
    *,
    correction: float | None = None,
    keepdim: bool = False,
) -> Node:
    """Variance with Bessel-style ``correction``."""
    return moments(ctx, x, dim, correction, keepdim)[0]


def var_dim(
    ctx: DecompContext, x: Node, dim: Dims = None, unbiased: bool = True, keepdim: bool = False
) -> Node:
    """Variance, ``unbiased`` meaning ``correction=1``."""
    return moments(ctx, x, dim, 1 if unbiased else 0, keepdim)[0]


def var_mean(
    ctx: DecompContext,
    x: Node,
    dim: Dims = None,
    *,
    correction: float | None = None,
    keepdim: bool = False,
) -> tuple[Node, Node]:
    """``(var, mean)``."""
    return moments(ctx, x, dim, correction, keepdim)


def std(
    ctx: DecompContext,
    x: Node,
    dim: Dims = None,
    *,
    correction: float | None = None,
    keepdim: bool = False,
) -> Node:
    """``sqrt(var)``."""
    variance = moments(ctx, x, dim, correction, keepdim)[0]
    dtype = variance.tensor_meta.dtype
    return ctx.cast(ctx.prim("sqrt", ctx.cast(variance, computation_dtype(dtype))), dtype)


def std_mean(
    ctx: DecompContext,
    x: Node,
    dim: Dims = None,
    *,
    correction: float | None = None,
    keepdim: bool = False,
) -> tuple[Node, Node]:
    """``(sqrt(var), mean)``."""
    variance, avg = moments(ctx, x, dim, correction, keepdim)
    dtype = variance.tensor_meta.dtype
    return ctx.cast(ctx.prim("sqrt", ctx.cast(variance, computation_dtype(dtype))), dtype), avg


RULES = RuleTable(
    {
        "aten.sum.dim_IntList": sum_,
        "aten.sum.default": sum_default,
        "aten.prod.default": prod_default,
        "aten.prod.dim_int": prod,
        "aten.cumsum.default": cumsum,
        "aten.mean.dim": mean,
        "aten.mean.default": mean_default,
        "aten.amax.default": _extremum("amax"),
        "aten.amin.default": _extremum("amin"),
        "aten.var.correction": var,
        "aten.var.dim": var_dim,
        "aten.var_mean.correction": var_mean,
        "aten.std.correction": std,
        "aten.std_mean.correction": std_mean,
    }
)
