"""Arg-reductions and boolean reductions: argmax/argmin, max.dim/min.dim, any, all,
max/min of a whole tensor."""

from __future__ import annotations

from typing import Any

import torch

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext, canonical_dim, canonical_dims
from torchstrata.decomp.rules.reductions import reduce
from torchstrata.decomp.table import NotDecomposable, RuleTable


def _arg(name: str) -> Any:
    def rule(ctx: DecompContext, x: Node, dim: int | None = None, keepdim: bool = False) -> Node:
        shape = x.tensor_meta.shape
        if x.tensor_meta.dtype is torch.bool:
            x = ctx.cast(x, torch.uint8)
        if dim is None or not shape:
            flat = ctx.reshape(x, [x.tensor_meta.numel])
            if x.tensor_meta.numel == 0:
                raise NotDecomposable(f"{name} of an empty tensor")
            out = ctx.prim(name, flat, 0)
            return ctx.reshape(out, [1] * len(shape)) if keepdim else out
        d = canonical_dim(dim, len(shape))
        if shape[d] == 0:
            raise NotDecomposable(f"{name} over an empty dim")
        out = ctx.prim(name, x, d)
        return ctx.keepdim(out, [d], shape) if keepdim else out

    rule.__name__ = name
    rule.__doc__ = f"``prims.{name}`` over one dim (all elements when ``dim`` is None)."
    return rule


def _value_index(reduction: str, arg: str) -> Any:
    arg_rule = _arg(arg)

    def rule(ctx: DecompContext, x: Node, dim: int, keepdim: bool = False) -> tuple[Node, Node]:
        shape = x.tensor_meta.shape
        dtype = x.tensor_meta.dtype
        if not shape:
            return x, ctx.full([], 0, torch.int64)
        d = canonical_dim(dim, len(shape))
        if shape[d] == 0:
            raise NotDecomposable(f"{reduction} over an empty dim")
        work = ctx.cast(x, torch.uint8) if dtype is torch.bool else x
        values = ctx.cast(reduce(ctx, reduction, work, [d], keepdim, work.tensor_meta.dtype), dtype)
        return values, arg_rule(ctx, x, d, keepdim)

    rule.__name__ = f"{reduction}_dim"
    rule.__doc__ = f"``(prims.{reduction}, prims.{arg})`` over ``dim``."
    return rule


def _whole(reduction: str) -> Any:
    def rule(ctx: DecompContext, x: Node) -> Node:
        dtype = x.tensor_meta.dtype
        if x.tensor_meta.numel == 0:
            raise NotDecomposable(f"{reduction} of an empty tensor")
        work = ctx.cast(x, torch.uint8) if dtype is torch.bool else x
        return ctx.cast(reduce(ctx, reduction, work, None, False, work.tensor_meta.dtype), dtype)

    rule.__name__ = reduction
    rule.__doc__ = f"``prims.{reduction}`` of every element."
    return rule


def _boolean(reduction: str) -> Any:
    def rule(ctx: DecompContext, x: Node, dim: Any = None, keepdim: bool = False) -> Node:
        dtype = x.tensor_meta.dtype
        truth = ctx.cast(ctx.prim("ne", x, 0) if dtype is not torch.bool else x, torch.uint8)
        out = ctx.prim("ne", reduce(ctx, reduction, truth, dim, keepdim, torch.uint8), 0)
        return ctx.cast(out, torch.uint8) if dtype is torch.uint8 else out

    rule.__name__ = "any" if reduction == "amax" else "all"
    rule.__doc__ = f"``{rule.__name__}`` as ``prims.{reduction}`` of ``x != 0``."
    return rule


def _boolean_dims(reduction: str) -> Any:
    inner = _boolean(reduction)

    def rule(ctx: DecompContext, x: Node, dim: Any = None, keepdim: bool = False) -> Node:
        if dim is not None and not canonical_dims(dim, x.tensor_meta.ndim) and x.tensor_meta.ndim:
            dim = None
        return inner(ctx, x, dim, keepdim)

    rule.__doc__ = inner.__doc__
    return rule


RULES = RuleTable(
    {
        "aten.argmax.default": _arg("argmax"),
        "aten.argmin.default": _arg("argmin"),
        "aten.max.dim": _value_index("amax", "argmax"),
        "aten.min.dim": _value_index("amin", "argmin"),
        "aten.max.default": _whole("amax"),
        "aten.min.default": _whole("amin"),
        "aten.any.default": _boolean("amax"),
        "aten.any.dim": _boolean("amax"),
        "aten.any.dims": _boolean_dims("amax"),
        "aten.all.default": _boolean("amin"),
        "aten.all.dim": _boolean("amin"),
        "aten.all.dims": _boolean_dims("amin"),
    }
)
