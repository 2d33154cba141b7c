"""gather, scatter, index_select, advanced indexing (``index.Tensor``) and ``index_put``.

Advanced indexing moves the indexed dims to the front, flattens them into one dim and
``prims.gather``\\s rows at the linear index ``sum(i_k * stride_k)`` (negative indices
wrapped); ``index_put`` scatters the same way. Bool index tensors (data-dependent
shapes) stay extern.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext, broadcast_shapes, canonical_dim
from torchstrata.decomp.promotion import computation_dtype
from torchstrata.decomp.table import NotDecomposable, RuleTable


def _need_rank(x: Node, what: str) -> None:
    if x.tensor_meta.ndim == 0:
        raise NotDecomposable(f"{what} of a 0-dim tensor")


def gather(
    ctx: DecompContext, x: Node, dim: int, index: Node, *, sparse_grad: bool = False
) -> Node:
    """``prims.gather``."""
    _need_rank(x, "gather")
    if index.tensor_meta.ndim != x.tensor_meta.ndim:
        raise NotDecomposable("gather with an index of another rank")
    index = ctx.cast(index, torch.int64)
    return ctx.prim("gather", x, canonical_dim(dim, x.tensor_meta.ndim), index)


def _src_like_index(ctx: DecompContext, src: Any, index: Node, dtype: torch.dtype) -> Node:
    shape = index.tensor_meta.shape
    if not isinstance(src, Node):
        return ctx.full(list(shape), src, dtype)
    src = ctx.cast(src, dtype)
    if src.tensor_meta.shape != shape:
        if src.tensor_meta.ndim != len(shape):
            raise NotDecomposable("scatter src of another rank")
        src = ctx.prim("slice", src, [0] * len(shape), list(shape), [1] * len(shape))
    return src


def _scatter(name: str) -> Any:
    def rule(ctx: DecompContext, x: Node, dim: int, index: Node, src: Any, **kwargs: Any) -> Node:
        _need_rank(x, name)
        if kwargs.get("reduce") is not None or index.tensor_meta.ndim != x.tensor_meta.ndim:
            raise NotDecomposable(f"{name} with reduce= or an index of another rank")
        dtype = x.tensor_meta.dtype
        if name == "scatter_add" and dtype is torch.bool:
            raise NotDecomposable("scatter_add of bool")
        src = _src_like_index(ctx, src, index, dtype)
        index = ctx.cast(index, torch.int64)
        return ctx.prim(name, x, canonical_dim(dim, x.tensor_meta.ndim), index, src)

    rule.__name__ = name
    rule.__doc__ = f"``prims.{name}`` (src sliced to the index's shape; a value filled)."
    return rule


def index_select(ctx: DecompContext, x: Node, dim: int, index: Node) -> Node:
    """``prims.gather`` with ``index`` broadcast along every other dim."""
    if x.tensor_meta.ndim == 0 or index.tensor_meta.ndim > 1:
        raise NotDecomposable("index_select of a 0-dim tensor or with a 0-dim index")
    shape = list(x.tensor_meta.shape)
    d = canonical_dim(dim, len(shape))
    shape[d] = index.tensor_meta.numel
    flat = ctx.cast(ctx.reshape(index, [index.tensor_meta.numel]), torch.int64)
    return ctx.prim("gather", x, d, ctx.prim("broadcast_in_dim", flat, shape, [d]))


def _plan(ctx: DecompContext, x: Node, indices: Sequence[Node | None]) -> dict[str, Any]:
    """Permute ``x`` so indexed dims lead, and compute the broadcast linear index."""
    shape = x.tensor_meta.shape
    if len(indices) > len(shape) or x.tensor_meta.numel == 0:
        raise NotDecomposable("too many indices, or an empty source")
    given = {d: i for d, i in enumerate(indices) if i is not None}
    dims = list(given)
    if not dims:
        raise NotDecomposable("index without index tensors")
    for tensor in given.values():
        if tensor.tensor_meta.dtype not in (torch.int64, torch.int32):
            raise NotDecomposable(f"index tensor of {tensor.tensor_meta.dtype}")
    rest = [d for d in range(len(shape)) if d not in dims]
    index_shape = broadcast_shapes(*(given[d].tensor_meta.shape for d in dims))
    linear = None
    stride = 1
    for d in reversed(dims):
        idx = ctx.broadcast_to(ctx.cast(given[d], torch.int64), index_shape)
        idx = ctx.prim("where", ctx.prim("lt", idx, 0), ctx.prim("add", idx, shape[d]), idx)
        term = ctx.prim("mul", idx, stride) if stride != 1 else idx
        linear = term if linear is None else ctx.prim("add", linear, term)
        stride *= shape[d]
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    return {
        "dims": dims,
        "rest": rest,
        "index_shape": list(index_shape),
        "linear": linear,
        "rows": stride,
        "cols": math.prod(shape[d] for d in rest),
        "front": dims[0] if adjacent else 0,
    }


def _result_order(plan: dict[str, Any]) -> list[int]:
    """Permutation from ``[*index_shape, *rest]`` to eager's result layout."""
    k, front = len(plan["index_shape"]), plan["front"]
    rest = list(range(k, k + len(plan["rest"])))
    return rest[:front] + list(range(k)) + rest[front:]


def index(ctx: DecompContext, x: Node, indices: Sequence[Node | None]) -> Node:
    """Advanced indexing ``x[i0, i1, ...]`` with integer index tensors (None = full slice)."""
    plan = _plan(ctx, x, indices)
    shape = x.tensor_meta.shape
    moved = (
        ctx.prim("permute", x, plan["dims"] + plan["rest"])
        if plan["dims"] + plan["rest"] != list(range(len(shape)))
        else x
    )
    table = ctx.reshape(moved, [plan["rows"], plan["cols"]])
    count = math.prod(plan["index_shape"])
    flat = ctx.reshape(plan["linear"], [count])
    picked = ctx.prim(
        "gather", table, 0, ctx.prim("broadcast_in_dim", flat, [count, plan["cols"]], [0])
    )
    out = ctx.reshape(picked, plan["index_shape"] + [shape[d] for d in plan["rest"]])
    order = _result_order(plan)
    return out if order == list(range(len(order))) else ctx.prim("permute", out, order)


def index_put(
    ctx: DecompContext,
    x: Node,
    indices: Sequence[Node | None],
    values: Node,
    accumulate: bool = False,
) -> Node:
    """``x`` with ``values`` written (or added) at the indexed positions."""
    plan = _plan(ctx, x, indices)
    shape = x.tensor_meta.shape
    dtype = x.tensor_meta.dtype
    if accumulate and dtype is torch.bool:
        raise NotDecomposable("accumulating index_put of bool")
    forward = plan["dims"] + plan["rest"]
    moved = ctx.prim("permute", x, forward) if forward != list(range(len(shape))) else x
    compute = computation_dtype(dtype) if accumulate else dtype
    table = ctx.reshape(ctx.cast(moved, compute), [plan["rows"], plan["cols"]])
    count = math.prod(plan["index_shape"])
    result_shape = plan["index_shape"] + [shape[d] for d in plan["rest"]]
    order = _result_order(plan)
    eager_shape = [result_shape[o] for o in order]
    vals = ctx.broadcast_to(ctx.cast(values, compute), eager_shape)
    inverse = [order.index(i) for i in range(len(order))]
    if inverse != list(range(len(inverse))):
        vals = ctx.prim("permute", vals, inverse)
    vals = ctx.reshape(vals, [count, plan["cols"]])
    flat = ctx.reshape(plan["linear"], [count])
    where = ctx.prim("broadcast_in_dim", flat, [count, plan["cols"]], [0])
    written = ctx.prim("scatter_add" if accumulate else "scatter", table, 0, where, vals)
    out = ctx.reshape(written, [shape[d] for d in forward])
    inverse_forward = [forward.index(i) for i in range(len(shape))]
    if inverse_forward != list(range(len(shape))):
        out = ctx.prim("permute", out, inverse_forward)
    return ctx.cast(out, dtype)


RULES = RuleTable(
    {
        "aten.gather.default": gather,
        "aten.scatter.src": _scatter("scatter"),
        "aten.scatter.value": _scatter("scatter"),
        "aten.scatter_add.default": _scatter("scatter_add"),
        "aten.index_select.default": index_select,
        "aten.index.Tensor": index,
        "aten.index_put.default": index_put,
    }
)
