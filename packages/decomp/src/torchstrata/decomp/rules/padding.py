"""Reflection and replication padding: ``prims.gather`` at computed source indices.

Along each padded dim of size ``n`` the output position ``i`` (``-left <= i < n + right``)
reads source index ``clamp(i, 0, n - 1)`` (replicate) or ``(n-1) - |(n-1) - |i||``
(reflect, edge not repeated).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext
from torchstrata.decomp.table import NotDecomposable, RuleTable


def _source_index(ctx: DecompContext, n: int, left: int, right: int, reflect: bool) -> Node:
    positions = ctx.iota(n + left + right, start=-left)
    if not reflect:
        return ctx.prim("minimum", ctx.prim("maximum", positions, 0), n - 1)
    inner = ctx.prim("abs", ctx.prim("sub", n - 1, ctx.prim("abs", positions)))
    return ctx.prim("sub", n - 1, inner)


def _pad(reflect: bool, rank: int) -> Any:
    def rule(ctx: DecompContext, x: Node, padding: Sequence[int]) -> Node:
        if len(padding) != 2 * rank or x.tensor_meta.ndim < rank:
            raise NotDecomposable("padding list does not match the op's rank")
        out = x
        for i in range(rank):
            d = x.tensor_meta.ndim - 1 - i
            left, right = padding[2 * i], padding[2 * i + 1]
            shape = list(out.tensor_meta.shape)
            n = shape[d]
            if left == right == 0:
                continue
            if n == 0 or (reflect and (left >= n or right >= n)) or min(left, right) < -n:
                raise NotDecomposable("padding too large for the dim")
            index = _source_index(ctx, n, left, right, reflect)
            shape[d] = n + left + right
            out = ctx.prim("gather", out, d, ctx.prim("broadcast_in_dim", index, shape, [d]))
        return out

    rule.__name__ = f"{'reflection' if reflect else 'replication'}_pad{rank}d"
    rule.__doc__ = "Pad the trailing dims by gathering at reflected/clamped source indices."
    return rule


RULES = RuleTable(
    {
        **{f"aten.reflection_pad{r}d.default": _pad(True, r) for r in (1, 2, 3)},
        **{f"aten.replication_pad{r}d.default": _pad(False, r) for r in (1, 2, 3)},
    }
)
