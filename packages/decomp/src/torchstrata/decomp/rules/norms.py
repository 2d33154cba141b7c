"""logsumexp, vector norms and nansum (accumulating like eager)."""

from __future__ import annotations

import math
from typing import Any

import torch

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext, canonical_dims
from torchstrata.decomp.promotion import computation_dtype, is_integral
from torchstrata.decomp.rules.reductions import Dims, sum_
from torchstrata.decomp.table import NotDecomposable, RuleTable


def logsumexp(ctx: DecompContext, x: Node, dim: Dims = (), keepdim: bool = False) -> Node:
    """``log(sum(exp(x - m))) + m`` with ``m = amax(x)`` (0 where ``m`` is infinite)."""
    dtype = x.tensor_meta.dtype
    out_dtype = torch.get_default_dtype() if is_integral(dtype) else dtype
    shape = x.tensor_meta.shape
    dims = canonical_dims(dim, len(shape))
    if any(shape[d] == 0 for d in dims):
        raise NotDecomposable("logsumexp over an empty dim")
    xc = ctx.cast(x, computation_dtype(out_dtype))
    peak = ctx.prim("amax", xc, dims)
    peak = ctx.prim(
        "where",
        ctx.prim("isinf", peak),
        ctx.full(peak.tensor_meta.shape, 0.0, xc.tensor_meta.dtype),
        peak,
    )
    shifted = ctx.prim("sub", xc, ctx.broadcast_reduced(peak, dims, shape))
    out = ctx.prim("add", ctx.prim("log", ctx.prim("sum", ctx.prim("exp", shifted), dims)), peak)
    return ctx.cast(ctx.keepdim(out, dims, shape) if keepdim else out, out_dtype)


def vector_norm(
    ctx: DecompContext,
    x: Node,
    ord: Any = 2,
    dim: Dims = None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> Node:
    """``sum(|x| ** ord) ** (1 / ord)``; ``inf``/``-inf`` are amax/amin of ``|x|``, 0 counts."""
    in_dtype = x.tensor_meta.dtype
    if not in_dtype.is_floating_point:
        raise NotDecomposable(f"vector_norm of {in_dtype}")
    out_dtype = dtype or in_dtype
    shape = x.tensor_meta.shape
    dims = canonical_dims(dim, len(shape))
    compute = computation_dtype(out_dtype)
    a = ctx.prim("abs", ctx.cast(ctx.cast(x, out_dtype), compute))
    if ord in (math.inf, -math.inf):
        if any(shape[d] == 0 for d in dims):
            raise NotDecomposable("inf-norm over an empty dim")
        out = ctx.prim("amax" if ord > 0 else "amin", a, dims)
    elif ord == 0:
        out = ctx.prim("sum", ctx.cast(ctx.prim("ne", a, 0), compute), dims)
    elif ord == 1:
        out = ctx.prim("sum", a, dims)
    elif ord == 2:
        out = ctx.prim("sqrt", ctx.prim("sum", ctx.prim("mul", a, a), dims))
    elif isinstance(ord, int | float) and ord > 0:
        out = ctx.prim("pow", ctx.prim("sum", ctx.prim("pow", a, float(ord)), dims), 1.0 / ord)
    else:
        raise NotDecomposable(f"vector_norm ord={ord!r}")
    return ctx.cast(ctx.keepdim(out, dims, shape) if keepdim else out, out_dtype)


def nansum(
    ctx: DecompContext,
    x: Node,
    dim: Dims = None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> Node:
    """``sum`` with NaNs counted as zero."""
    if x.tensor_meta.dtype.is_floating_point:
        x = ctx.where(ctx.prim("isnan", x), 0.0, x)
    return sum_(ctx, x, dim, keepdim, dtype=dtype)


RULES = RuleTable(
    {
        "aten.logsumexp.default": logsumexp,
        "aten.linalg_vector_norm.default": vector_norm,
        "aten.nansum.default": nansum,
    }
)
