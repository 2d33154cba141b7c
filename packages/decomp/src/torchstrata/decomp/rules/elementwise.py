"""Elementwise rules: arithmetic, math, activations, comparisons, where, clamp."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext
from torchstrata.decomp.promotion import Promotion, is_integral
from torchstrata.decomp.table import NotDecomposable, RuleTable

Body = Callable[..., Any]


def pointwise(
    ctx: DecompContext,
    args: tuple[Any, ...],
    body: Body,
    kind: Promotion = Promotion.DEFAULT,
    opmath: bool = True,
) -> Any:
    """Promote and broadcast ``args``, build ``body(*args)``, cast to the result dtype."""
    result_dtype, operands = ctx.promote(*args, kind=kind, opmath=opmath)
    out = body(*ctx.broadcast(*operands))
    return ctx.cast(out, result_dtype)


# ------------------------------------------------------------------ arithmetic


def _scaled(ctx: DecompContext, value: Any, alpha: Any) -> Any:
    if alpha == 1:
        return value
    if not isinstance(value, Node):
        return value * alpha
    return ctx.prim("mul", value, alpha)


def _scalar_as_operand(a: Any, b: Any) -> tuple[Any, Any]:
    """``a`` and ``b`` with a Python number beside a 16-bit float tensor rounded to its dtype:
    eager's add and sub convert the scalar to the tensor's dtype before computing in float32
    (``x_f16 + 0.1`` adds float16(0.1); ``-inf + 1e30`` is nan, 1e30 being inf in float16),
    where mul and div keep it in float32."""

    def rounded(scalar: Any, other: Any) -> Any:
        if isinstance(scalar, bool) or not isinstance(scalar, int | float):
            return scalar
        if not isinstance(other, Node) or other.tensor_meta.dtype not in _HALF_FLOATS:
            return scalar
        return torch.tensor(scalar, dtype=other.tensor_meta.dtype).item()

    return rounded(a, b), rounded(b, a)


_HALF_FLOATS = (torch.float16, torch.bfloat16)


def add(ctx: DecompContext, a: Any, b: Any, alpha: Any = 1) -> Any:
    """``a + alpha * b``."""
    a, b = _scalar_as_operand(a, b)
    return pointwise(ctx, (a, b), lambda x, y: ctx.prim("add", x, _scaled(ctx, y, alpha)))


def sub(ctx: DecompContext, a: Any, b: Any, alpha: Any = 1) -> Any:
    """``a - alpha * b``."""
    a, b = _scalar_as_operand(a, b)
    return pointwise(ctx, (a, b), lambda x, y: ctx.prim("sub", x, _scaled(ctx, y, alpha)))


def rsub(ctx: DecompContext, a: Any, b: Any, alpha: Any = 1) -> Any:
    """``b - alpha * a``."""
    return sub(ctx, b, a, alpha)


def mul(ctx: DecompContext, a: Any, b: Any) -> Any:
    """``a * b``."""
    return pointwise(ctx, (a, b), lambda x, y: ctx.prim("mul", x, y))


def _floor_divide(ctx: DecompContext, a: Any, b: Any, integral: bool) -> Any:
    """Python's ``a // b``, following eager's kernels (c10 ``div_floor_*``)."""
    if integral:
        quotient = ctx.prim("div", a, b)  # truncating for integers
        inexact = ctx.prim("ne", ctx.prim("fmod", a, b), 0)
        signs_differ = ctx.prim("bitwise_xor", ctx.prim("lt", a, 0), ctx.prim("lt", b, 0))
        adjust = ctx.prim("bitwise_and", inexact, signs_differ)
        return ctx.prim("where", adjust, ctx.prim("sub", quotient, 1), quotient)
    mod = ctx.prim("fmod", a, b)
    div = ctx.prim("div", ctx.prim("sub", a, mod), b)
    mod_sign_differs = ctx.prim("bitwise_xor", ctx.prim("lt", b, 0), ctx.prim("lt", mod, 0))
    adjust = ctx.prim("bitwise_and", ctx.prim("ne", mod, 0), mod_sign_differs)
    div = ctx.prim("where", adjust, ctx.prim("sub", div, 1), div)
    floored = ctx.prim("floor", div)
    floored = ctx.prim(
        "where",
        ctx.prim("gt", ctx.prim("sub", div, floored), 0.5),
        ctx.prim("add", floored, 1),
        floored,
    )
    true_div = ctx.prim("div", a, b)
    signed_zero = ctx.prim("mul", true_div, 0)
    floored = ctx.prim("where", ctx.prim("eq", div, 0), signed_zero, floored)
    return ctx.prim("where", ctx.prim("eq", b, 0), true_div, floored)


def div(ctx: DecompContext, a: Any, b: Any, rounding_mode: str | None = None) -> Any:
    """``a / b`` with ``rounding_mode`` None (true division), ``"trunc"`` or ``"floor"``."""
    if rounding_mode is None:
        return pointwise(ctx, (a, b), lambda x, y: ctx.prim("div", x, y), Promotion.INT_TO_FLOAT)
    result_dtype, operands = ctx.promote(a, b)
    compute = next(op.tensor_meta.dtype for op in operands if isinstance(op, Node))
    x, y = ctx.broadcast(*(ctx.as_tensor(op, compute) for op in operands))
    integral = is_integral(x.tensor_meta.dtype)
    if rounding_mode == "trunc":
        out = ctx.prim("div", x, y)
        if not integral:
            out = ctx.prim("trunc", out)
    elif rounding_mode == "floor":
        out = _floor_divide(ctx, x, y, integral)
    else:
        raise NotDecomposable(f"unknown rounding_mode {rounding_mode!r}")
    return ctx.cast(out, result_dtype)


#: Scalar exponents eager's CPU kernel computes with another function, whose special values
#: differ from pow's: ``pow(-inf, 0.5)`` is nan (sqrt), not inf; ``pow(-0.0, 0.5)`` is
#: -0.0. Except for float16 tensors, which take the general pow.
_POW_AS = {0.5: "sqrt", -0.5: "rsqrt"}


def pow_(ctx: DecompContext, a: Any, b: Any) -> Any:
    """``a ** b`` (``sqrt``/``rsqrt`` for a scalar exponent of 0.5/-0.5, as eager)."""
    special = _POW_AS.get(b) if isinstance(b, float | int) and not isinstance(b, bool) else None
    if special is not None and a.tensor_meta.dtype is not torch.float16:
        return pointwise(ctx, (a, b), lambda x, y: ctx.prim(special, x))
    return pointwise(ctx, (a, b), lambda x, y: ctx.prim("pow", x, y))


def maximum(ctx: DecompContext, a: Any, b: Any) -> Any:
    """Elementwise max (NaN-propagating)."""
    return pointwise(ctx, (a, b), lambda x, y: ctx.prim("maximum", x, y), opmath=False)


def minimum(ctx: DecompContext, a: Any, b: Any) -> Any:
    """Elementwise min (NaN-propagating)."""
    return pointwise(ctx, (a, b), lambda x, y: ctx.prim("minimum", x, y), opmath=False)


def clamp(ctx: DecompContext, x: Any, min: Any = None, max: Any = None) -> Any:
    """``minimum(maximum(x, min), max)``; a missing bound is skipped."""
    bounds = [v for v in (min, max) if v is not None]
    if not bounds:
        raise NotDecomposable("clamp without bounds")

    def body(value: Any, *rest: Any) -> Any:
        rest_iter = iter(rest)
        if min is not None:
            value = ctx.prim("maximum", value, next(rest_iter))
        if max is not None:
            value = ctx.prim("minimum", value, next(rest_iter))
        return value

    return pointwise(ctx, (x, *bounds), body, opmath=False)


def clamp_min(ctx: DecompContext, x: Any, min: Any) -> Any:
    """``maximum(x, min)``."""
    return clamp(ctx, x, min=min)


def clamp_max(ctx: DecompContext, x: Any, max: Any) -> Any:
    """``minimum(x, max)``."""
    return clamp(ctx, x, max=max)


# ------------------------------------------------------------------ unary math


def _unary(name: str, kind: Promotion = Promotion.INT_TO_FLOAT, opmath: bool = True) -> Body:
    def rule(ctx: DecompContext, x: Any) -> Any:
        return pointwise(ctx, (x,), lambda v: ctx.prim(name, v), kind, opmath)

    rule.__name__ = name
    rule.__doc__ = f"``prims.{name}`` with PyTorch's promotion."
    return rule


def abs_(ctx: DecompContext, x: Any) -> Any:
    """``|x|`` (bool is rejected by eager too)."""
    if x.tensor_meta.dtype is torch.bool:
        raise NotDecomposable("abs of bool")
    return pointwise(ctx, (x,), lambda v: ctx.prim("abs", v), opmath=False)


def _sigmoid(ctx: DecompContext, v: Any) -> Any:
    return ctx.prim("div", 1.0, ctx.prim("add", ctx.prim("exp", ctx.prim("neg", v)), 1.0))


def sigmoid(ctx: DecompContext, x: Any) -> Any:
    """``1 / (1 + exp(-x))``."""
    return pointwise(ctx, (x,), lambda v: _sigmoid(ctx, v), Promotion.INT_TO_FLOAT)


def silu(ctx: DecompContext, x: Any) -> Any:
    """``x * sigmoid(x)``: eager divides, ``x / (1 + exp(-x))`` (within an ulp of this), but
    the product shares its one division with ``silu_backward``'s sigmoid when a training
    kernel computes both (SwiGLU's backward on the CPU: one division per element, not
    two)."""
    return pointwise(ctx, (x,), lambda v: ctx.prim("mul", v, _sigmoid(ctx, v)))


def relu(ctx: DecompContext, x: Any) -> Any:
    """``maximum(x, 0)`` (NaN stays NaN, like eager)."""
    if x.tensor_meta.dtype is torch.bool:
        raise NotDecomposable("relu of bool")
    return pointwise(ctx, (x,), lambda v: ctx.prim("maximum", v, 0), opmath=False)


def gelu(ctx: DecompContext, x: Any, approximate: str = "none") -> Any:
    """``x * Φ(x)`` with erf, or the tanh approximation."""

    def exact(v: Any) -> Any:
        cdf = ctx.prim("add", ctx.prim("erf", ctx.prim("mul", v, math.sqrt(0.5))), 1.0)
        return ctx.prim("mul", ctx.prim("mul", v, 0.5), cdf)

    def tanh(v: Any) -> Any:
        # 0.5 * (1 + tanh(u)) is sigmoid(2u): x / (1 + exp(-2u)) is the same function with
        # one exp and one division instead of a tanh (and without the cancellation of
        # 1 + tanh(u) for negative u).
        cube = ctx.prim("mul", ctx.prim("mul", v, v), v)
        inner = ctx.prim(
            "mul", ctx.prim("add", v, ctx.prim("mul", cube, 0.044715)), -2 * math.sqrt(2 / math.pi)
        )
        return ctx.prim("div", v, ctx.prim("add", ctx.prim("exp", inner), 1.0))

    if approximate not in ("none", "tanh"):
        raise NotDecomposable(f"gelu approximate={approximate!r}")
    return pointwise(ctx, (x,), exact if approximate == "none" else tanh)


# ----------------------------------------------------------- comparisons, where


def _comparison(name: str) -> Body:
    def rule(ctx: DecompContext, a: Any, b: Any) -> Any:
        return pointwise(
            ctx, (a, b), lambda x, y: ctx.prim(name, x, y), Promotion.ALWAYS_BOOL, opmath=False
        )

    rule.__name__ = name
    rule.__doc__ = f"``a {name} b`` compared in the promoted dtype; bool result."
    return rule


def where(ctx: DecompContext, cond: Any, a: Any, b: Any) -> Any:
    """``a`` where ``cond`` else ``b``, promoted and broadcast."""
    result_dtype, (x, y) = ctx.promote(a, b, opmath=False)
    cond, x, y = ctx.broadcast(cond, x, y)
    if not isinstance(x, Node) and not isinstance(y, Node):
        x = ctx.full(cond.tensor_meta.shape, x, result_dtype)
    return ctx.where(ctx.cast(cond, torch.bool), x, y)


def masked_fill(ctx: DecompContext, x: Any, mask: Any, value: Any) -> Any:
    """``value`` where ``mask`` else ``x``; keeps ``x``'s shape and dtype."""
    dtype = x.tensor_meta.dtype
    shape = x.tensor_meta.shape
    if isinstance(value, Node):
        value = ctx.broadcast_to(ctx.cast(value, dtype), shape)
    elif is_integral(dtype) and isinstance(value, float) and dtype is not torch.bool:
        raise NotDecomposable("masked_fill of an integer tensor with a float")
    return ctx.where(ctx.broadcast_to(mask, shape), value, x)


RULES = RuleTable(
    {
        "aten.add.Tensor": add,
        "aten.add.Scalar": add,
        "aten.sub.Tensor": sub,
        "aten.sub.Scalar": sub,
        "aten.rsub.Tensor": rsub,
        "aten.rsub.Scalar": rsub,
        "aten.mul.Tensor": mul,
        "aten.mul.Scalar": mul,
        "aten.div.Tensor": div,
        "aten.div.Scalar": div,
        "aten.div.Tensor_mode": div,
        "aten.div.Scalar_mode": div,
        "aten.pow.Tensor_Scalar": pow_,
        "aten.pow.Tensor_Tensor": pow_,
        "aten.maximum.default": maximum,
        "aten.minimum.default": minimum,
        "aten.clamp.default": clamp,
        "aten.clamp.Tensor": clamp,
        "aten.clamp_min.default": clamp_min,
        "aten.clamp_max.default": clamp_max,
        "aten.neg.default": _unary("neg", Promotion.DEFAULT, opmath=False),
        # The lazy negation of ``z.conj().imag``: prims read memory as it is, so the
        # negation is computed (the value, not a view: no backend keeps the bit).
        "aten._neg_view.default": _unary("neg", Promotion.DEFAULT, opmath=False),
        "aten.abs.default": abs_,
        **{
            f"aten.{name}.default": _unary(name)
            for name in (
                "exp",
                "exp2",
                "expm1",
                "log",
                "log2",
                "log1p",
                "sqrt",
                "rsqrt",
                "reciprocal",
                "sin",
                "cos",
                "tanh",
                "erf",
            )
        },
        "aten.sigmoid.default": sigmoid,
        "aten.silu.default": silu,
        "aten.relu.default": relu,
        "aten.gelu.default": gelu,
        **{
            f"aten.{name}.{overload}": _comparison(name)
            for name in ("eq", "ne", "lt", "le", "gt", "ge")
            for overload in ("Tensor", "Scalar")
        },
        "aten.where.self": where,
        "aten.masked_fill.Scalar": masked_fill,
        "aten.masked_fill.Tensor": masked_fill,
    }
)
