"""View, copy, cast and creation rules.

ATen views carry strides that depend on their input's layout; prims views describe the
same *logical* tensor (``prims.reshape`` of a non-contiguous input is still its
elements in row-major order), which is all a functional graph can observe. A copy
(``clone``, same-dtype ``_to_copy``) becomes the identity unless its source is a graph
input or a view of one: then it is an explicit copy (``prims.mul(x, 1)``), so an output
never aliases an input that eager would have copied.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from torchstrata.core import Node, is_dense, same_layout
from torchstrata.decomp.context import DecompContext, canonical_dim
from torchstrata.decomp.table import NotDecomposable, RuleTable


def infer_shape(shape: Sequence[int], numel: int) -> list[int]:
    """``shape`` with one ``-1`` resolved so it holds ``numel`` elements."""
    shape = list(shape)
    if shape.count(-1) > 1:
        raise NotDecomposable(f"more than one -1 in {shape}")
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        shape[shape.index(-1)] = numel // known if known else 0
    return shape


def reshape(ctx: DecompContext, x: Node, shape: Sequence[int]) -> Node:
    """``view``/``reshape``/``_unsafe_view``: ``prims.reshape``."""
    return ctx.reshape(x, infer_shape(shape, x.tensor_meta.numel))


def permute(ctx: DecompContext, x: Node, dims: Sequence[int]) -> Node:
    """``prims.permute`` with canonical dims (identity permutations vanish)."""
    ndim = x.tensor_meta.ndim
    order = [canonical_dim(d, ndim) for d in dims]
    return x if order == list(range(ndim)) else ctx.prim("permute", x, order)


def transpose(ctx: DecompContext, x: Node, dim0: int, dim1: int) -> Node:
    """Swap two dims."""
    ndim = x.tensor_meta.ndim
    if ndim == 0:
        return x
    order = list(range(ndim))
    a, b = canonical_dim(dim0, ndim), canonical_dim(dim1, ndim)
    order[a], order[b] = order[b], order[a]
    return permute(ctx, x, order)


def t(ctx: DecompContext, x: Node) -> Node:
    """Transpose of a matrix; vectors and scalars unchanged."""
    return x if x.tensor_meta.ndim < 2 else permute(ctx, x, [1, 0])


def unsqueeze(ctx: DecompContext, x: Node, dim: int) -> Node:
    """A size-1 dim inserted at ``dim`` (``prims.broadcast_in_dim``)."""
    shape = list(x.tensor_meta.shape)
    dim = canonical_dim(dim, len(shape) + 1)
    kept = [d for d in range(len(shape) + 1) if d != dim]
    return ctx.prim("broadcast_in_dim", x, [*shape[:dim], 1, *shape[dim:]], kept)


def squeeze(ctx: DecompContext, x: Node, dim: int | Sequence[int] | None = None) -> Node:
    """Size-1 dims removed (all, or those among ``dim``)."""
    shape = x.tensor_meta.shape
    if dim is None:
        candidates = set(range(len(shape)))
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        candidates = {canonical_dim(d, len(shape)) for d in dims} if shape else set()
    return ctx.reshape(x, [s for d, s in enumerate(shape) if not (d in candidates and s == 1)])


def expand(ctx: DecompContext, x: Node, size: Sequence[int], implicit: bool = False) -> Node:
    """``prims.broadcast_in_dim`` to ``size`` (``-1`` keeps a dim)."""
    shape = x.tensor_meta.shape
    lead = len(size) - len(shape)
    out = [shape[d - lead] if s == -1 else s for d, s in enumerate(size)]
    return ctx.broadcast_to(x, out)


def slice_(
    ctx: DecompContext,
    x: Node,
    dim: int = 0,
    start: int | None = None,
    end: int | None = None,
    step: int = 1,
) -> Node:
    """``x[start:end:step]`` along ``dim``, with Python's clamping of bounds."""
    shape = x.tensor_meta.shape
    dim = canonical_dim(dim, len(shape))
    size = shape[dim]
    lo, hi = _clamped(start, 0, size), _clamped(end, size, size)
    hi = max(hi, lo)
    if (lo, hi, step) == (0, size, 1):
        return x
    starts, limits, steps = [0] * len(shape), list(shape), [1] * len(shape)
    starts[dim], limits[dim], steps[dim] = lo, hi, step
    return ctx.prim("slice", x, starts, limits, steps)


def _clamped(bound: Any, default: Any, size: Any) -> Any:
    """A slice bound clamped to ``[0, size]`` as ``slice.indices`` does for a positive
    step, by comparisons: ``slice.indices`` takes an ``int`` and would specialise a
    symbolic ``size`` to one value (decision 0280); a comparison is a condition."""
    if bound is None:
        return default
    if bound < 0:
        bound = bound + size
        return bound if bound > 0 else 0
    return bound if bound < size else size


def select(ctx: DecompContext, x: Node, dim: int, index: int) -> Node:
    """``x`` indexed at ``index`` along ``dim`` (that dim dropped)."""
    shape = x.tensor_meta.shape
    dim = canonical_dim(dim, len(shape))
    if not -shape[dim] <= index < shape[dim]:
        raise NotDecomposable(f"select index {index} out of range for size {shape[dim]}")
    index %= shape[dim]
    picked = slice_(ctx, x, dim, index, index + 1)
    return ctx.reshape(picked, [s for d, s in enumerate(shape) if d != dim])


def alias(ctx: DecompContext, x: Node) -> Node:
    """``alias``/``detach``: the same value."""
    return x


def clone(ctx: DecompContext, x: Node, *, memory_format: Any = None) -> Node | None:
    """The identity, except for copies of graph inputs (or views of them) and copies into
    another layout (``contiguous()`` of a channels-last value, ``memory_format=``): those
    become an exact copy (``ctx.copy``: ``prims.mul(x, 1)``, for bool
    ``prims.bitwise_or(x, False)``), so an output never aliases an input that eager would
    have copied, and the copy takes the ATen node's layout (``decomp.layouts``)."""
    have, want = x.tensor_meta, ctx.out_meta
    relaid = not same_layout(want.shape, want.strides, have.strides) and is_dense(
        want.shape, want.strides
    )
    return ctx.copy(x) if relaid or ctx.aliases_input(x) else x


def to_copy(
    ctx: DecompContext,
    x: Node,
    *,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
    non_blocking: bool = False,
    memory_format: Any = None,
) -> Node | None:
    """A cast (``prims.convert_element_type``); device moves stay extern."""
    if device is not None and torch.device(device) != x.tensor_meta.device:
        return None
    if dtype is None or dtype == x.tensor_meta.dtype:
        return clone(ctx, x)
    return ctx.cast(x, dtype)


def to_dtype(
    ctx: DecompContext,
    x: Node,
    dtype: torch.dtype,
    non_blocking: bool = False,
    copy: bool = False,
    memory_format: Any = None,
) -> Node | None:
    """``aten.to.dtype``: a cast, or ``x`` itself when the dtype already matches."""
    if dtype == x.tensor_meta.dtype:
        return clone(ctx, x) if copy else x
    return ctx.cast(x, dtype)


def _creation(value_of: Any) -> Any:
    def rule(ctx: DecompContext, *args: Any, **kwargs: Any) -> Node:
        meta = ctx.out_meta
        return ctx.full(meta.shape, value_of(args), meta.dtype, meta.device)

    rule.__doc__ = "``prims.full`` with the shape, dtype and device of the ATen node."
    return rule


RULES = RuleTable(
    {
        **{f"aten.{name}.default": reshape for name in ("view", "reshape", "_unsafe_view")},
        "aten.permute.default": permute,
        "aten.transpose.int": transpose,
        "aten.t.default": t,
        "aten.unsqueeze.default": unsqueeze,
        "aten.squeeze.default": squeeze,
        "aten.squeeze.dim": squeeze,
        "aten.squeeze.dims": squeeze,
        "aten.expand.default": expand,
        "aten.slice.Tensor": slice_,
        "aten.select.int": select,
        "aten.alias.default": alias,
        "aten.detach.default": alias,
        "aten.clone.default": clone,
        "aten._to_copy.default": to_copy,
        "aten.to.dtype": to_dtype,
        "aten.full.default": _creation(lambda args: args[1]),
        "aten.full_like.default": _creation(lambda args: args[1]),
        "aten.zeros.default": _creation(lambda args: 0),
        "aten.zeros_like.default": _creation(lambda args: 0),
        "aten.ones.default": _creation(lambda args: 1),
        "aten.ones_like.default": _creation(lambda args: 1),
        "aten.scalar_tensor.default": _creation(lambda args: args[0]),
    }
)
