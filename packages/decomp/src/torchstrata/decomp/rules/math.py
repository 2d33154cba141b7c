"""More elementwise math: trig, rounding, predicates, logical and bitwise ops, lerp,
addcmul/addcdiv, atan2, remainder/fmod, with PyTorch's promotion."""

from __future__ import annotations

from typing import Any

import torch

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext
from torchstrata.decomp.promotion import Promotion, is_integral
from torchstrata.decomp.rules.elementwise import pointwise
from torchstrata.decomp.table import NotDecomposable, RuleTable


def _unary(name: str, kind: Promotion, opmath: bool = True, ints_identity: bool = False) -> Any:
    def rule(ctx: DecompContext, x: Node) -> Node:
        if ints_identity and is_integral(x.tensor_meta.dtype):
            if x.tensor_meta.dtype is torch.bool:
                raise NotDecomposable(f"{name} of bool")
            return x
        return pointwise(ctx, (x,), lambda v: ctx.prim(name, v), kind, opmath)

    rule.__name__ = name
    rule.__doc__ = f"``prims.{name}`` with PyTorch's promotion."
    return rule


def _binary(name: str, kind: Promotion = Promotion.DEFAULT, opmath: bool = False) -> Any:
    def rule(ctx: DecompContext, a: Any, b: Any) -> Node:
        return pointwise(ctx, (a, b), lambda x, y: ctx.prim(name, x, y), kind, opmath)

    rule.__name__ = name
    rule.__doc__ = f"``prims.{name}`` with PyTorch's promotion and broadcasting."
    return rule


def _integral_binary(name: str) -> Any:
    inner = _binary(name)

    def rule(ctx: DecompContext, a: Any, b: Any) -> Node:
        for v in (a, b):
            if isinstance(v, Node) and not is_integral(v.tensor_meta.dtype):
                raise NotDecomposable(f"{name} of {v.tensor_meta.dtype}")
        return inner(ctx, a, b)

    rule.__name__ = name
    rule.__doc__ = inner.__doc__
    return rule


def isnan(ctx: DecompContext, x: Node) -> Node:
    """``x != x`` (always false for integers)."""
    return ctx.prim("isnan", x) if x.tensor_meta.dtype.is_floating_point else ctx.prim("ne", x, x)


def isinf(ctx: DecompContext, x: Node) -> Node:
    """``|x| == inf`` (always false for integers)."""
    return ctx.prim("isinf", x) if x.tensor_meta.dtype.is_floating_point else ctx.prim("ne", x, x)


def _truth(ctx: DecompContext, x: Any) -> Any:
    if not isinstance(x, Node):
        return bool(x)
    return x if x.tensor_meta.dtype is torch.bool else ctx.prim("ne", x, 0)


def logical_not(ctx: DecompContext, x: Node) -> Node:
    """``x == 0`` as bool."""
    return (
        ctx.prim("eq", x, 0)
        if x.tensor_meta.dtype is not torch.bool
        else ctx.prim("bitwise_not", x)
    )


def _logical(name: str) -> Any:
    def rule(ctx: DecompContext, a: Node, b: Node) -> Node:
        x, y = ctx.broadcast(_truth(ctx, a), _truth(ctx, b))
        return ctx.prim(f"bitwise_{name}", x, y)

    rule.__name__ = f"logical_{name}"
    rule.__doc__ = f"``bool(a) {name} bool(b)``."
    return rule


def sign(ctx: DecompContext, x: Node) -> Node:
    """-1, 0 or 1 in ``x``'s dtype (bool: itself)."""
    return x if x.tensor_meta.dtype is torch.bool else ctx.prim("sign", x)


def lerp(ctx: DecompContext, start: Node, end: Node, weight: Any) -> Node:
    """``start + w (end - start)`` for ``|w| < 0.5``, else ``end - (end - start)(1 - w)``."""

    def body(a: Node, b: Node, w: Any) -> Node:
        diff = ctx.prim("sub", b, a)
        low = ctx.prim("add", a, ctx.prim("mul", diff, w))
        high = ctx.prim(
            "sub",
            b,
            ctx.prim("mul", diff, ctx.prim("sub", 1.0, w) if isinstance(w, Node) else 1.0 - w),
        )
        if not isinstance(w, Node):
            return low if abs(w) < 0.5 else high
        return ctx.prim("where", ctx.prim("lt", ctx.prim("abs", w), 0.5), low, high)

    if isinstance(weight, Node):
        return pointwise(ctx, (start, end, weight), body)
    return pointwise(ctx, (start, end), lambda a, b: body(a, b, weight))


def addcmul(ctx: DecompContext, x: Node, t1: Node, t2: Node, *, value: Any = 1) -> Node:
    """``x + value * t1 * t2``."""
    return pointwise(
        ctx,
        (x, t1, t2),
        lambda a, b, c: ctx.prim("add", a, ctx.prim("mul", ctx.prim("mul", b, c), value)),
    )


def addcdiv(ctx: DecompContext, x: Node, t1: Node, t2: Node, *, value: Any = 1) -> Node:
    """``x + value * t1 / t2`` (float only, like eager)."""
    for t in (t1, t2):
        if is_integral(t.tensor_meta.dtype):
            raise NotDecomposable("addcdiv of integers")
    return pointwise(
        ctx,
        (x, t1, t2),
        lambda a, b, c: ctx.prim("add", a, ctx.prim("mul", ctx.prim("div", b, c), value)),
    )


def square(ctx: DecompContext, x: Node) -> Node:
    """``x * x`` (bool squares to int64, like eager)."""
    if x.tensor_meta.dtype is torch.bool:
        x = ctx.cast(x, torch.int64)
    return pointwise(ctx, (x,), lambda v: ctx.prim("mul", v, v))


def logaddexp(ctx: DecompContext, a: Node, b: Node) -> Node:
    """``max(a, b) + log1p(exp(-|a - b|))`` (equal infinities give themselves)."""

    def body(x: Node, y: Node) -> Node:
        big = ctx.prim("maximum", x, y)
        gap = ctx.prim("neg", ctx.prim("abs", ctx.prim("sub", x, y)))
        out = ctx.prim("add", big, ctx.prim("log1p", ctx.prim("exp", gap)))
        same_inf = ctx.prim("bitwise_and", ctx.prim("isinf", x), ctx.prim("eq", x, y))
        return ctx.prim("where", same_inf, x, out)

    for v in (a, b):
        if not v.tensor_meta.dtype.is_floating_point:
            raise NotDecomposable("logaddexp of integers")
    return pointwise(ctx, (a, b), body)


FLOAT_UNARY = ("tan", "asin", "acos", "atan", "sinh", "cosh")

RULES = RuleTable(
    {
        **{f"aten.{n}.default": _unary(n, Promotion.INT_TO_FLOAT) for n in FLOAT_UNARY},
        **{
            f"aten.{n}.default": _unary(n, Promotion.DEFAULT, opmath=False, ints_identity=True)
            for n in ("floor", "ceil", "round", "trunc")
        },
        "aten.sign.default": sign,
        "aten.isnan.default": isnan,
        "aten.isinf.default": isinf,
        "aten.logical_not.default": logical_not,
        "aten.logical_and.default": _logical("and"),
        "aten.logical_or.default": _logical("or"),
        "aten.logical_xor.default": _logical("xor"),
        "aten.bitwise_not.default": _unary("bitwise_not", Promotion.DEFAULT, opmath=False),
        **{
            f"aten.bitwise_{n}.{o}": _integral_binary(f"bitwise_{n}")
            for n in ("and", "or", "xor")
            for o in ("Tensor", "Scalar")
        },
        "aten.atan2.default": _binary("atan2", Promotion.INT_TO_FLOAT, opmath=True),
        "aten.remainder.Tensor": _binary("remainder"),
        "aten.remainder.Scalar": _binary("remainder"),
        "aten.fmod.Tensor": _binary("fmod"),
        "aten.fmod.Scalar": _binary("fmod"),
        "aten.lerp.Scalar": lerp,
        "aten.lerp.Tensor": lerp,
        "aten.addcmul.default": addcmul,
        "aten.addcdiv.default": addcdiv,
        "aten.square.default": square,
        "aten.logaddexp.default": logaddexp,
    }
)
