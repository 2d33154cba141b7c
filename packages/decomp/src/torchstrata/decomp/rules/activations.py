"""Activations and their backward ops, with eager's formulas and promotion.

float16/bfloat16 are computed in float32 and rounded once (see ``pointwise``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext
from torchstrata.decomp.promotion import Promotion
from torchstrata.decomp.rules.elementwise import pointwise
from torchstrata.decomp.table import NotDecomposable, RuleTable


def _float_only(x: Any, what: str) -> None:
    if isinstance(x, Node) and not x.tensor_meta.dtype.is_floating_point:
        raise NotDecomposable(f"{what} of {x.tensor_meta.dtype}")


def _clamp01_6(ctx: DecompContext, v: Node) -> Node:
    return ctx.prim("minimum", ctx.prim("maximum", ctx.prim("add", v, 3.0), 0.0), 6.0)


def hardswish(ctx: DecompContext, x: Node) -> Node:
    """``x * min(max(x + 3, 0), 6) / 6``."""
    _float_only(x, "hardswish")
    return pointwise(
        ctx, (x,), lambda v: ctx.prim("div", ctx.prim("mul", v, _clamp01_6(ctx, v)), 6.0)
    )


def hardsigmoid(ctx: DecompContext, x: Node) -> Node:
    """``min(max(x + 3, 0), 6) / 6``."""
    _float_only(x, "hardsigmoid")
    return pointwise(ctx, (x,), lambda v: ctx.prim("div", _clamp01_6(ctx, v), 6.0))


def _softplus(ctx: DecompContext, v: Node, beta: Any = 1, threshold: Any = 20) -> Node:
    scaled = ctx.prim("mul", v, beta) if beta != 1 else v
    soft = ctx.prim("log1p", ctx.prim("exp", scaled))
    if beta != 1:
        soft = ctx.prim("div", soft, beta)
    return ctx.prim("where", ctx.prim("gt", scaled, threshold), v, soft)


def softplus(ctx: DecompContext, x: Node, beta: Any = 1, threshold: Any = 20) -> Node:
    """``log1p(exp(beta x)) / beta``, or ``x`` where ``beta x > threshold``."""
    _float_only(x, "softplus")
    return pointwise(ctx, (x,), lambda v: _softplus(ctx, v, beta, threshold))


def mish(ctx: DecompContext, x: Node) -> Node:
    """``x * tanh(log1p(exp(x)))``."""
    _float_only(x, "mish")
    return pointwise(
        ctx,
        (x,),
        lambda v: ctx.prim("mul", v, ctx.prim("tanh", ctx.prim("log1p", ctx.prim("exp", v)))),
    )


def elu(
    ctx: DecompContext, x: Node, alpha: Any = 1.0, scale: Any = 1.0, input_scale: Any = 1.0
) -> Node:
    """``x * scale`` where ``x > 0`` else ``alpha * scale * expm1(x * input_scale)``."""
    _float_only(x, "elu")

    def body(v: Node) -> Node:
        neg = ctx.prim("mul", ctx.prim("expm1", ctx.prim("mul", v, input_scale)), alpha * scale)
        return ctx.prim("where", ctx.prim("gt", v, 0), ctx.prim("mul", v, scale), neg)

    return pointwise(ctx, (x,), body)


def leaky_relu(ctx: DecompContext, x: Node, negative_slope: Any = 0.01) -> Node:
    """``x`` where ``x > 0`` else ``x * negative_slope``."""
    _float_only(x, "leaky_relu")
    return pointwise(
        ctx,
        (x,),
        lambda v: ctx.prim("where", ctx.prim("gt", v, 0), v, ctx.prim("mul", v, negative_slope)),
    )


def hardtanh(ctx: DecompContext, x: Node, min_val: Any = -1.0, max_val: Any = 1.0) -> Node:
    """``clamp(x, min_val, max_val)``."""
    if x.tensor_meta.dtype is torch.bool:
        raise NotDecomposable("hardtanh of bool")
    return pointwise(
        ctx,
        (x,),
        lambda v: ctx.prim("minimum", ctx.prim("maximum", v, min_val), max_val),
        opmath=False,
    )


def threshold(ctx: DecompContext, x: Node, threshold: Any, value: Any) -> Node:
    """``value`` where ``x <= threshold`` else ``x``."""
    if x.tensor_meta.dtype is torch.bool:
        raise NotDecomposable("threshold of bool")
    return pointwise(
        ctx, (x,), lambda v: ctx.where(ctx.prim("le", v, threshold), value, v), opmath=False
    )


def threshold_backward(ctx: DecompContext, grad: Node, x: Node, threshold: Any) -> Node:
    """``0`` where ``x <= threshold`` else ``grad``."""
    result, (g,) = ctx.promote(grad, opmath=False)
    g, xb = ctx.broadcast(g, x)
    return ctx.cast(ctx.where(ctx.prim("le", xb, threshold), 0, g), result)


def _sigmoid(ctx: DecompContext, v: Node) -> Node:
    return ctx.prim("div", 1.0, ctx.prim("add", ctx.prim("exp", ctx.prim("neg", v)), 1.0))


def sigmoid_backward(ctx: DecompContext, grad: Node, y: Node) -> Node:
    """``grad * (1 - y) * y``."""
    return pointwise(
        ctx, (grad, y), lambda g, v: ctx.prim("mul", ctx.prim("mul", g, ctx.prim("sub", 1.0, v)), v)
    )


def tanh_backward(ctx: DecompContext, grad: Node, y: Node) -> Node:
    """``grad * (1 - y * y)``."""
    return pointwise(
        ctx,
        (grad, y),
        lambda g, v: ctx.prim("mul", g, ctx.prim("sub", 1.0, ctx.prim("mul", v, v))),
    )


def silu_backward(ctx: DecompContext, grad: Node, x: Node) -> Node:
    """``grad * s * (1 + x * (1 - s))`` with ``s = sigmoid(x)``."""

    def body(g: Node, v: Node) -> Node:
        s = _sigmoid(ctx, v)
        inner = ctx.prim("add", ctx.prim("mul", v, ctx.prim("sub", 1.0, s)), 1.0)
        return ctx.prim("mul", ctx.prim("mul", g, s), inner)

    return pointwise(ctx, (grad, x), body)


def gelu_backward(ctx: DecompContext, grad: Node, x: Node, approximate: str = "none") -> Node:
    """The derivative of ``gelu`` (erf or tanh form) times ``grad``, like eager's kernel."""
    if approximate not in ("none", "tanh"):
        raise NotDecomposable(f"gelu approximate={approximate!r}")

    def exact(g: Node, v: Node) -> Node:
        cdf = ctx.prim(
            "mul", ctx.prim("add", ctx.prim("erf", ctx.prim("mul", v, math.sqrt(0.5))), 1.0), 0.5
        )
        pdf = ctx.prim(
            "mul",
            ctx.prim("exp", ctx.prim("mul", ctx.prim("mul", v, v), -0.5)),
            1 / math.sqrt(2 * math.pi),
        )
        return ctx.prim("mul", g, ctx.prim("add", cdf, ctx.prim("mul", v, pdf)))

    def tanh(g: Node, v: Node) -> Node:
        beta, kappa = math.sqrt(2 / math.pi), 0.044715
        sq = ctx.prim("mul", v, v)
        inner = ctx.prim(
            "mul", ctx.prim("add", v, ctx.prim("mul", ctx.prim("mul", sq, v), kappa)), beta
        )
        t = ctx.prim("tanh", inner)
        left_derivative = ctx.prim("mul", ctx.prim("add", t, 1.0), 0.5)
        dt = ctx.prim("sub", 1.0, ctx.prim("mul", t, t))
        right_derivative = ctx.prim(
            "mul",
            ctx.prim("mul", ctx.prim("mul", ctx.prim("mul", v, 0.5), dt), beta),
            ctx.prim("add", ctx.prim("mul", sq, 3 * kappa), 1.0),
        )
        return ctx.prim("mul", g, ctx.prim("add", left_derivative, right_derivative))

    return pointwise(ctx, (grad, x), exact if approximate == "none" else tanh)


def logit(ctx: DecompContext, x: Node, eps: float | None = None) -> Node:
    """``log(x / (1 - x))`` with ``x`` clamped to ``[eps, 1 - eps]``."""

    def body(v: Node) -> Node:
        if eps is not None:
            v = ctx.prim("minimum", ctx.prim("maximum", v, eps), 1 - eps)
        return ctx.prim("log", ctx.prim("div", v, ctx.prim("sub", 1.0, v)))

    return pointwise(ctx, (x,), body, Promotion.INT_TO_FLOAT)


RULES = RuleTable(
    {
        "aten.hardswish.default": hardswish,
        "aten.hardsigmoid.default": hardsigmoid,
        "aten.softplus.default": softplus,
        "aten.mish.default": mish,
        "aten.elu.default": elu,
        "aten.leaky_relu.default": leaky_relu,
        "aten.hardtanh.default": hardtanh,
        "aten.threshold.default": threshold,
        "aten.threshold_backward.default": threshold_backward,
        "aten.sigmoid_backward.default": sigmoid_backward,
        "aten.tanh_backward.default": tanh_backward,
        "aten.silu_backward.default": silu_backward,
        "aten.gelu_backward.default": gelu_backward,
        "aten.logit.default": logit,
    }
)
