"""Max pooling (1-D, 2-D, 3-D, with and without indices) as strided slices and ``where``.

The input is padded with the dtype's lowest value (``-inf`` for floats) on the left by
``padding`` and on the right as far as the last window reaches (``ceil_mode`` windows may
run past the right padding). Each window offset is then one strided ``prims.slice`` of the
padded input with the output's shape, and the offsets are combined in ATen's order (the
last pooled dim fastest) with ATen's update rule, ``val > max || isnan(val)``: the first
maximum wins, a NaN wins and a later NaN replaces it, padding never wins. The code
generators fuse the whole window into one kernel of strided loads; the index chain
(``h * W + w`` into the unpadded input) is dead code when only the values are read.

Where no element beats the lowest value (a window of ``-inf``), ATen's index is the
window's first position inside the input; so is ours.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext
from torchstrata.decomp.rules.shapes import constant_pad_nd
from torchstrata.decomp.table import NotDecomposable, RuleTable

#: The largest window decomposed (one slice, compare and select per element; larger
#: windows, rare, stay ATen's loop rather than grow the graph).
MAX_WINDOW = 64


def _per_dim(value: int | Sequence[int], rank: int, default: Sequence[int] | None = None) -> list:
    """A pooling argument expanded to one int per pooled dim (``[]`` means ``default``)."""
    values = [value] if isinstance(value, int) else list(value)
    if not values and default is not None:
        values = list(default)
    if len(values) == 1:
        values = values * rank
    if len(values) != rank or not all(isinstance(v, int) for v in values):
        raise NotDecomposable(f"pooling argument {value!r} is not {rank} ints")
    return values


def _lowest(dtype: torch.dtype) -> Any:
    if dtype.is_floating_point:
        return float("-inf")
    if dtype is torch.bool or dtype.is_complex:
        raise NotDecomposable(f"max pooling of {dtype}")
    return torch.iinfo(dtype).min


class Window:
    """One max-pooling problem: the pooled dims of ``x`` and the window geometry; the
    output's shape from ``output`` (the backward's gradient) or the ATen node's meta."""

    def __init__(
        self,
        ctx: DecompContext,
        x: Node,
        rank: int,
        kernel: Any,
        stride: Any,
        padding: Any,
        dilation: Any,
        output: Node | None = None,
    ) -> None:
        shape = x.tensor_meta.shape
        if len(shape) not in (rank + 1, rank + 2) or not all(isinstance(s, int) for s in shape):
            raise NotDecomposable("max pooling needs a static batched or unbatched input")
        self.kernel = _per_dim(kernel, rank)
        self.stride = _per_dim(stride, rank, self.kernel)
        self.padding = _per_dim(padding, rank)
        self.dilation = _per_dim(dilation, rank)
        if any(2 * p > k for p, k in zip(self.padding, self.kernel, strict=True)):
            raise NotDecomposable("pad should be at most half of the kernel size")
        self.ctx, self.x, self.rank = ctx, x, rank
        self.lead = len(shape) - rank
        self.in_sizes = list(shape[self.lead :])
        meta = output.tensor_meta if output is not None else ctx.out_metas[0]
        self.out_shape = list(meta.shape)
        if len(self.out_shape) != len(shape):
            raise NotDecomposable("max pooling output and input ranks differ")
        self.out_sizes = self.out_shape[self.lead :]
        if not all(isinstance(s, int) for s in self.out_shape):
            raise NotDecomposable("max pooling with a symbolic output size")
        if math.prod(self.kernel) > MAX_WINDOW:
            raise NotDecomposable(f"a window of more than {MAX_WINDOW} elements")
        if min(self.out_shape, default=1) <= 0 or x.tensor_meta.numel == 0:
            raise NotDecomposable("max pooling of an empty tensor")

    def padded(self, lowest: Any) -> Node:
        """``x`` with ``lowest`` around the pooled dims, as far as any window reads."""
        pads: list[int] = []
        for d in reversed(range(self.rank)):
            reach = (
                (self.out_sizes[d] - 1) * self.stride[d]
                + (self.kernel[d] - 1) * self.dilation[d]
                + 1
            )
            right = max(0, reach - self.padding[d] - self.in_sizes[d])
            pads += [self.padding[d], right]
        if not any(pads):
            return self.x
        return constant_pad_nd(self.ctx, self.x, pads, lowest)

    def offsets(self) -> list[tuple[int, ...]]:
        """Every window offset, the last pooled dim fastest (ATen's visiting order)."""
        result: list[tuple[int, ...]] = [()]
        for k in self.kernel:
            result = [(*o, i) for o in result for i in range(k)]
        return result

    def window_slice(self, padded: Node, offset: tuple[int, ...]) -> Node:
        """The padded input's elements at ``offset`` of every window (the output's shape)."""
        ndim = len(self.out_shape)
        starts, limits, steps = [0] * ndim, list(self.out_shape), [1] * ndim
        for d, k in enumerate(offset):
            start = k * self.dilation[d]
            starts[self.lead + d] = start
            limits[self.lead + d] = start + (self.out_sizes[d] - 1) * self.stride[d] + 1
            steps[self.lead + d] = self.stride[d]
        return self.ctx.prim("slice", padded, starts, limits, steps)

    def positions(self, d: int, k: int) -> Node:
        """Input positions along pooled dim ``d`` of window offset ``k``, one per output."""
        start = k * self.dilation[d] - self.padding[d]
        return self.ctx.iota(self.out_sizes[d], torch.int64, start, self.stride[d])

    def first_positions(self, d: int) -> Node:
        """Each window's first position inside the input along pooled dim ``d``."""
        if self.padding[d] == 0:
            return self.positions(d, 0)
        first = self.positions(d, self.kernel[d] - 1)
        for k in reversed(range(self.kernel[d] - 1)):
            candidate = self.positions(d, k)
            first = self.ctx.prim("where", self.ctx.prim("ge", candidate, 0), candidate, first)
        return first

    def flat_index(self, per_dim: Sequence[Node], shape: Sequence[int] | None = None) -> Node:
        """``sum(position_d * row_stride_d)`` over the pooled dims, broadcast to ``shape``
        (the output's by default)."""
        shape = list(shape) if shape is not None else self.out_shape
        total: Node | None = None
        row_stride = 1
        for d in reversed(range(self.rank)):
            term = per_dim[d] if row_stride == 1 else self.ctx.prim("mul", per_dim[d], row_stride)
            term = self.ctx.prim("broadcast_in_dim", term, shape, [self.lead + d])
            total = term if total is None else self.ctx.prim("add", total, term)
            row_stride *= self.in_sizes[d]
        assert total is not None
        return total


def _max_pool(rank: int, with_indices: bool) -> Any:
    def rule(
        ctx: DecompContext,
        x: Node,
        kernel_size: Any,
        stride: Any = (),
        padding: Any = 0,
        dilation: Any = 1,
        ceil_mode: bool = False,
    ) -> Node | tuple[Node, Node]:
        window = Window(ctx, x, rank, kernel_size, stride, padding, dilation)
        lowest = _lowest(x.tensor_meta.dtype)
        floating = x.tensor_meta.dtype.is_floating_point
        padded = window.padded(lowest)
        best: Node | None = None
        index = window.flat_index([window.first_positions(d) for d in range(rank)])
        for offset in window.offsets():
            value = window.window_slice(padded, offset)
            # Every value beats (or is) the lowest: the first offset is where ``best`` starts.
            take = ctx.prim("gt", value, lowest if best is None else best)
            if floating:
                take = ctx.prim("bitwise_or", take, ctx.prim("isnan", value))
            positions = [window.positions(d, k) for d, k in enumerate(offset)]
            index = ctx.prim("where", take, window.flat_index(positions), index)
            # ``maximum(value, best)`` is ATen's update (``value`` where it is greater or
            # NaN, else ``best``), and names ``best`` once: ``where(take, value, best)``
            # named it twice, a tree of 2**offsets terms for a kernel that expands it.
            best = value if best is None else ctx.prim("maximum", value, best)
        assert best is not None
        if len(window.offsets()) == 1:
            best = ctx.copy(best)  # a 1-element window: the slice is a view of ``x``
        return (best, index) if with_indices else best

    kind = "with_indices" if with_indices else "values"
    rule.__name__ = f"max_pool{rank}d_{kind}"
    rule.__doc__ = f"{rank}-D max pooling over strided window slices ({kind})."
    return rule


RULES = RuleTable(
    {
        **{f"aten.max_pool{r}d_with_indices.default": _max_pool(r, True) for r in (1, 2, 3)},
        **{f"aten.max_pool{r}d.default": _max_pool(r, False) for r in (1, 2, 3)},
    }
)
