"""cat/stack/split/unbind, repeat, flip, roll, constant padding, triu/tril.

Everything is built from ``prims.cat``, ``prims.slice``, ``broadcast_in_dim``,
``reshape``, ``gather`` (flip) and ``iota`` masks (triu/tril).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext, canonical_dim
from torchstrata.decomp.promotion import result_type
from torchstrata.decomp.rules.views import slice_, unsqueeze
from torchstrata.decomp.table import NotDecomposable, RuleTable


def cat(ctx: DecompContext, tensors: Sequence[Node], dim: int = 0) -> Node:
    """``prims.cat`` of the promoted tensors (legacy empty 1-D tensors skipped, like eager)."""
    dtype = result_type(*tensors)
    kept = [t for t in tensors if not (t.tensor_meta.ndim == 1 and t.tensor_meta.numel == 0)]
    if not kept:
        raise NotDecomposable("cat of only empty tensors")
    ndim = kept[0].tensor_meta.ndim
    if ndim == 0:
        raise NotDecomposable("cat of 0-dim tensors")
    d = canonical_dim(dim, ndim)
    parts = [ctx.cast(t, dtype) for t in kept]
    return parts[0] if len(parts) == 1 else ctx.prim("cat", parts, d)


def stack(ctx: DecompContext, tensors: Sequence[Node], dim: int = 0) -> Node:
    """Each tensor unsqueezed at ``dim``, then concatenated."""
    ndim = tensors[0].tensor_meta.ndim
    d = canonical_dim(dim, ndim + 1)
    return cat(ctx, [unsqueeze(ctx, t, d) for t in tensors], d)


def split_with_sizes(
    ctx: DecompContext, x: Node, split_sizes: Sequence[int], dim: int = 0
) -> tuple:
    """Consecutive slices of the given sizes along ``dim``."""
    d = canonical_dim(dim, x.tensor_meta.ndim)
    if sum(split_sizes) != x.tensor_meta.shape[d]:
        raise NotDecomposable("split sizes do not add up")
    parts, start = [], 0
    for size in split_sizes:
        parts.append(slice_(ctx, x, d, start, start + size))
        start += size
    return tuple(parts)


def split(ctx: DecompContext, x: Node, split_size: int, dim: int = 0) -> tuple:
    """Slices of ``split_size`` (the last one shorter) along ``dim``."""
    d = canonical_dim(dim, x.tensor_meta.ndim)
    size = x.tensor_meta.shape[d]
    if split_size <= 0:
        raise NotDecomposable("split size must be positive")
    sizes = [min(split_size, size - s) for s in range(0, size, split_size)] or [0]
    return split_with_sizes(ctx, x, sizes, d)


def unbind(ctx: DecompContext, x: Node, dim: int = 0) -> tuple:
    """Every index along ``dim``, that dim dropped."""
    shape = x.tensor_meta.shape
    d = canonical_dim(dim, len(shape))
    rest = [s for i, s in enumerate(shape) if i != d]
    return tuple(ctx.reshape(slice_(ctx, x, d, i, i + 1), rest) for i in range(shape[d]))


def repeat(ctx: DecompContext, x: Node, repeats: Sequence[int]) -> Node:
    """Tile ``x``: broadcast to ``[r0, s0, r1, s1, ...]``, then merge pairs."""
    shape = list(x.tensor_meta.shape)
    if len(repeats) < len(shape):
        raise NotDecomposable("repeat with fewer repeats than dims")
    shape = [1] * (len(repeats) - len(shape)) + shape
    x = ctx.reshape(x, shape)
    wide = [v for pair in zip(repeats, shape) for v in pair]
    expanded = ctx.prim("broadcast_in_dim", x, wide, list(range(1, len(wide), 2)))
    return ctx.reshape(expanded, [r * s for r, s in zip(repeats, shape)])


def flip(ctx: DecompContext, x: Node, dims: Sequence[int]) -> Node:
    """``prims.gather`` with a reversed ``iota`` along each flipped dim."""
    shape = list(x.tensor_meta.shape)
    out = x
    for d in sorted({canonical_dim(d, len(shape)) for d in dims}) if shape else []:
        size = shape[d]
        if size <= 1:
            continue
        reverse = ctx.iota(size, torch.int64, size - 1, -1)
        out = ctx.prim("gather", out, d, ctx.prim("broadcast_in_dim", reverse, shape, [d]))
    return out


def roll(
    ctx: DecompContext, x: Node, shifts: Sequence[int] | int, dims: Sequence[int] | int = ()
) -> Node:
    """Rotate along ``dims`` by ``shifts`` (flattened when ``dims`` is empty)."""
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    shape = list(x.tensor_meta.shape)
    if not dims:
        if len(shifts) != 1:
            raise NotDecomposable("roll without dims takes one shift")
        flat = ctx.reshape(x, [x.tensor_meta.numel])
        return ctx.reshape(roll(ctx, flat, shifts, [0]), shape)
    if len(shifts) != len(dims):
        raise NotDecomposable("roll needs one shift per dim")
    out = x
    for shift, dim in zip(shifts, dims):
        d = canonical_dim(dim, len(shape))
        size = shape[d]
        if size == 0 or shift % size == 0:
            continue
        s = shift % size
        tail = slice_(ctx, out, d, size - s, size)
        head = slice_(ctx, out, d, 0, size - s)
        out = ctx.prim("cat", [tail, head], d)
    return out


def constant_pad_nd(ctx: DecompContext, x: Node, pad: Sequence[int], value: Any = 0) -> Node:
    """Pad (or, for negative pads, crop) the trailing dims; ``pad`` pairs start at the last dim."""
    if len(pad) % 2 or len(pad) // 2 > x.tensor_meta.ndim:
        raise NotDecomposable("constant_pad_nd with a bad pad list")
    dtype = x.tensor_meta.dtype
    out = x
    for i in range(len(pad) // 2):
        d = x.tensor_meta.ndim - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        size = out.tensor_meta.shape[d]
        lo, hi = max(-before, 0), size - max(-after, 0)
        if hi < lo:
            raise NotDecomposable("negative padding larger than the dim")
        out = slice_(ctx, out, d, lo, hi)
        parts: list[Node | None] = []
        for amount in (before, after):
            if amount > 0:
                fill_shape = list(out.tensor_meta.shape)
                fill_shape[d] = amount
                parts.append(ctx.full(fill_shape, value, dtype))
            else:
                parts.append(None)
        pieces = [p for p in (parts[0], out, parts[1]) if p is not None]
        if len(pieces) > 1:
            out = ctx.prim("cat", pieces, d)
    return out


def _triangle(upper: bool) -> Any:
    def rule(ctx: DecompContext, x: Node, diagonal: int = 0) -> Node:
        shape = list(x.tensor_meta.shape)
        if len(shape) < 2:
            raise NotDecomposable("triu/tril of a tensor of rank < 2")
        rows, cols = shape[-2], shape[-1]
        r = ctx.prim("broadcast_in_dim", ctx.iota(rows), [rows, cols], [0])
        c = ctx.prim("broadcast_in_dim", ctx.iota(cols), [rows, cols], [1])
        offset = ctx.prim("sub", c, r)
        keep = ctx.prim("ge" if upper else "le", offset, diagonal)
        keep = ctx.prim("broadcast_in_dim", keep, shape, [len(shape) - 2, len(shape) - 1])
        zero: Any = False if x.tensor_meta.dtype is torch.bool else 0
        return ctx.where(keep, x, zero)

    rule.__name__ = "triu" if upper else "tril"
    rule.__doc__ = f"``x`` where ``col - row {'>=' if upper else '<='} diagonal``, else 0."
    return rule


RULES = RuleTable(
    {
        "aten.cat.default": cat,
        "aten.stack.default": stack,
        "aten.split.Tensor": split,
        "aten.split_with_sizes.default": split_with_sizes,
        "aten.unbind.int": unbind,
        "aten.repeat.default": repeat,
        "aten.flip.default": flip,
        "aten.roll.default": roll,
        "aten.constant_pad_nd.default": constant_pad_nd,
        "aten.triu.default": _triangle(True),
        "aten.tril.default": _triangle(False),
    }
)
