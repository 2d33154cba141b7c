"""The max-pooling backward as a shifted read per window offset (no scatter, no gather).

The output window ``o`` reads input position ``i = o * stride - pad + k * dilation`` at
window offset ``k``; so, along each pooled dim, input ``i`` is read at offset ``k`` by
window ``(i + pad - k * dilation) / stride`` when that divides exactly and lands in
``[0, out)``. The argmax is spread to ``stride`` times the output's length with -1 (which
names no input) between its elements (a ``cat`` and a ``reshape``), the gradient by
repeating each element (a broadcast and a reshape); both are padded (argmax -1, gradient 0)
and sliced at ``pad - k * dilation``, so where the argmax read names ``i``, the window
exists and its gradient is the one read. The gradient at ``i`` sums,
over the offsets, the gradient of the windows whose argmax is ``i``, visiting the offsets
in the order that walks the windows upwards (ATen adds each output's gradient into its
argmax, outputs in order), in the opmath dtype. All views, pads and selects: the code
generators fuse it into one kernel.
"""

from __future__ import annotations

from typing import Any

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext
from torchstrata.decomp.promotion import computation_dtype
from torchstrata.decomp.rules.pooling import Window
from torchstrata.decomp.rules.shapes import constant_pad_nd
from torchstrata.decomp.rules.views import slice_
from torchstrata.decomp.table import NotDecomposable, RuleTable


def _spread(ctx: DecompContext, window: Window, t: Node, fill: Any = None) -> Node:
    """``t`` (output-shaped) with each pooled dim spread ``stride`` times: ``up[j] =
    t[j // stride]``, or with ``fill`` where ``stride`` does not divide ``j``."""
    if all(s == 1 for s in window.stride):
        return t
    lead = list(t.tensor_meta.shape[: window.lead])
    wide, merged, kept = list(lead), list(lead), list(range(window.lead))
    for size, stride in zip(window.out_sizes, window.stride, strict=True):
        kept.append(len(wide))
        wide += [size, stride]
        merged.append(size * stride)
    if fill is None:
        return ctx.reshape(ctx.prim("broadcast_in_dim", t, wide, kept), merged)
    narrow = [1 if d not in kept else size for d, size in enumerate(wide)]
    out = ctx.prim("broadcast_in_dim", t, narrow, kept)
    for d in range(window.rank):
        if window.stride[d] == 1:
            continue
        dim = kept[window.lead + d] + 1
        rest = list(out.tensor_meta.shape)
        rest[dim] = window.stride[d] - 1
        out = ctx.prim("cat", [out, ctx.full(rest, fill, t.tensor_meta.dtype)], dim)
    return ctx.reshape(out, merged)


def _shifted(ctx: DecompContext, window: Window, up: Node, offset: tuple, fill: Any) -> Node:
    """``up`` read at ``i + pad - k * dilation`` for every input position ``i``, ``fill``
    outside it."""
    pads: list[int] = []
    starts: list[int] = []
    for d in reversed(range(window.rank)):
        start = window.padding[d] - offset[d] * window.dilation[d]
        length = window.out_sizes[d] * window.stride[d]
        left, right = max(0, -start), max(0, window.in_sizes[d] + start - length)
        pads += [left, right]
        starts.insert(0, start + left)
    out = constant_pad_nd(ctx, up, pads, fill) if any(pads) else up
    for d, start in enumerate(starts):
        out = slice_(ctx, out, window.lead + d, start, start + window.in_sizes[d])
    return out


def _max_pool_backward(rank: int) -> Any:
    def rule(
        ctx: DecompContext,
        grad_output: Node,
        x: Node,
        kernel_size: Any,
        stride: Any,
        padding: Any,
        dilation: Any,
        ceil_mode: bool,
        indices: Node,
    ) -> Node:
        window = Window(ctx, x, rank, kernel_size, stride, padding, dilation, grad_output)
        dtype = grad_output.tensor_meta.dtype
        if (
            not dtype.is_floating_point
            or indices.tensor_meta.shape != grad_output.tensor_meta.shape
        ):
            raise NotDecomposable("max pooling backward of a non-float gradient")
        compute = computation_dtype(dtype)
        in_shape = list(x.tensor_meta.shape)
        grad = _spread(ctx, window, ctx.cast(grad_output, compute))
        argmax = _spread(ctx, window, indices, -1)
        positions = window.flat_index([ctx.iota(n) for n in window.in_sizes], in_shape)
        total: Node = ctx.full(in_shape, 0, compute)
        for offset in reversed(window.offsets()):
            hit = ctx.prim("eq", _shifted(ctx, window, argmax, offset, -1), positions)
            picked = ctx.where(hit, _shifted(ctx, window, grad, offset, 0.0), 0.0)
            total = ctx.prim("add", total, picked)
        return ctx.cast(total, dtype)

    rule.__name__ = f"max_pool{rank}d_with_indices_backward"
    rule.__doc__ = f"{rank}-D max pooling backward: a shifted read per window offset."
    return rule


RULES = RuleTable(
    {f"aten.max_pool{r}d_with_indices_backward.default": _max_pool_backward(r) for r in (2, 3)}
)
