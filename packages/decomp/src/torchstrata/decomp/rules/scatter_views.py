"""Odds and ends between views and indexing: ``copy``, ``fill``, ``slice_scatter``,
``diagonal``, ``dot``, tensor-bound ``clamp_min``/``clamp_max``, ``norm``, ``unsafe_split``."""

from __future__ import annotations

from typing import Any

import torch

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext, canonical_dim
from torchstrata.decomp.promotion import computation_dtype
from torchstrata.decomp.rules.elementwise import clamp
from torchstrata.decomp.rules.norms import vector_norm
from torchstrata.decomp.rules.shapes import split, split_with_sizes
from torchstrata.decomp.rules.views import slice_
from torchstrata.decomp.table import NotDecomposable, RuleTable


def copy(ctx: DecompContext, x: Node, src: Node, non_blocking: bool = False) -> Node:
    """``src`` cast to ``x``'s dtype and broadcast to its shape."""
    meta = x.tensor_meta
    if src.tensor_meta.device != meta.device:
        raise NotDecomposable("copy across devices")
    return ctx.broadcast_to(ctx.cast(src, meta.dtype), meta.shape)


def fill(ctx: DecompContext, x: Node, value: Any) -> Node:
    """A tensor like ``x`` filled with ``value`` (a number or a 0-dim tensor)."""
    meta = x.tensor_meta
    if isinstance(value, Node):
        return ctx.broadcast_to(ctx.cast(value, meta.dtype), meta.shape)
    return ctx.full(list(meta.shape), value, meta.dtype)


def slice_scatter(
    ctx: DecompContext,
    x: Node,
    src: Node,
    dim: int = 0,
    start: int | None = None,
    end: int | None = None,
    step: int = 1,
) -> Node:
    """``x`` with ``x[start:end:step]`` along ``dim`` replaced by ``src``, built from
    values at their logical indices (never a data-dependent store): with ``step`` 1,
    ``cat`` of the part of ``x`` before the slice, ``src`` and the part after it; else
    ``where`` each index along ``dim`` is in the slice, ``src`` gathered at its position
    in the slice, else ``x``. Either is a pointwise kernel the driver lays out as eager
    lays the result out (``x``'s layout), where a ``prims.scatter`` runs through ATen."""
    shape = list(x.tensor_meta.shape)
    if not shape:
        raise NotDecomposable("slice_scatter of a 0-dim tensor")
    d = canonical_dim(dim, len(shape))
    lo = _slice_start(start, shape[d])
    count = src.tensor_meta.shape[d] if src.tensor_meta.ndim == len(shape) else -1
    if count < 0 or src.tensor_meta.shape != (*shape[:d], count, *shape[d + 1 :]):
        raise NotDecomposable("slice_scatter of a src of another shape than the slice")
    if src.tensor_meta.numel == 0:
        return x
    src = ctx.cast(src, x.tensor_meta.dtype)
    if step == 1:
        before, after = slice_(ctx, x, d, 0, lo), slice_(ctx, x, d, lo + count, shape[d])
        pieces = [p for p in (before, src, after) if p.tensor_meta.shape[d] > 0]
        # src alone is the whole result: a copy of it, laid out as eager lays out x
        return ctx.prim("cat", pieces, d) if len(pieces) > 1 else ctx.copy(src)
    last = (count - 1) * step
    offset = ctx.iota(shape[d], start=-lo)  # position along dim minus the slice's start
    inside = ctx.prim(
        "bitwise_and",
        ctx.prim("bitwise_and", ctx.prim("ge", offset, 0), ctx.prim("le", offset, last)),
        ctx.prim("eq", ctx.prim("remainder", offset, step), 0),
    )
    position = ctx.prim("div", ctx.prim("minimum", ctx.prim("maximum", offset, 0), last), step)
    picked = ctx.prim("gather", src, d, ctx.prim("broadcast_in_dim", position, shape, [d]))
    return ctx.where(ctx.prim("broadcast_in_dim", inside, shape, [d]), picked, x)


def _slice_start(start: Any, length: Any) -> Any:
    """Where ``x[start:]`` (a positive step) starts in a dim of ``length``, as
    ``slice.indices`` says; ``start`` or ``length`` may be symbolic sizes (compared, so
    a condition is recorded, never made an int: ``cache[:, t : 2 * t] = k`` stays
    symbolic in ``t``)."""
    if start is None:
        return 0
    if start < 0:
        start = start + length
    return 0 if start < 0 else length if start > length else start


def diagonal(ctx: DecompContext, x: Node, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Node:
    """The diagonal of dims ``dim1``/``dim2`` as a new last dim: a strided slice of their
    flattened product."""
    shape = list(x.tensor_meta.shape)
    a, b = canonical_dim(dim1, len(shape)), canonical_dim(dim2, len(shape))
    if a == b:
        raise NotDecomposable("diagonal of one dim")
    rest = [d for d in range(len(shape)) if d not in (a, b)]
    rows, cols = shape[a], shape[b]
    length = max(min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols), 0)
    moved = ctx.prim("permute", x, [*rest, a, b]) if [*rest, a, b] != list(range(len(shape))) else x
    flat = ctx.reshape(moved, [*(shape[d] for d in rest), rows * cols])
    if length == 0:
        return ctx.full([*(shape[d] for d in rest), 0], 0, x.tensor_meta.dtype)
    first = offset if offset >= 0 else -offset * cols
    last = first + (length - 1) * (cols + 1) + 1
    lead = len(rest)
    starts = [0] * lead + [first]
    limits = [shape[d] for d in rest] + [last]
    steps = [1] * lead + [cols + 1]
    return ctx.prim("slice", flat, starts, limits, steps)


def dot(ctx: DecompContext, a: Node, b: Node) -> Node:
    """``sum(a * b)`` of two vectors of one dtype, accumulated like eager."""
    dtype = a.tensor_meta.dtype
    if b.tensor_meta.dtype != dtype or a.tensor_meta.ndim != 1 or dtype is torch.bool:
        raise NotDecomposable("dot of mixed dtypes or non-vectors")
    compute = computation_dtype(dtype)
    product = ctx.prim("mul", ctx.cast(a, compute), ctx.cast(b, compute))
    return ctx.cast(ctx.prim("sum", product, [0]), dtype)


def norm_scalar_opt_dim(
    ctx: DecompContext, x: Node, p: Any = 2, dim: Any = None, keepdim: bool = False
) -> Node:
    """``aten.norm.ScalarOpt_dim``: :func:`vector_norm` (``p=None`` is 2)."""
    return vector_norm(ctx, x, 2 if p is None else p, dim, keepdim)


RULES = RuleTable(
    {
        "aten.copy.default": copy,
        "aten.fill.Scalar": fill,
        "aten.fill.Tensor": fill,
        "aten.slice_scatter.default": slice_scatter,
        "aten.diagonal.default": diagonal,
        "aten.dot.default": dot,
        "aten.vdot.default": dot,
        "aten.clamp_min.Tensor": lambda ctx, x, bound: clamp(ctx, x, min=bound),
        "aten.clamp_max.Tensor": lambda ctx, x, bound: clamp(ctx, x, max=bound),
        "aten.norm.ScalarOpt_dim": norm_scalar_opt_dim,
        "aten.unsafe_split.Tensor": split,
        "aten.unsafe_split_with_sizes.default": split_with_sizes,
    }
)
