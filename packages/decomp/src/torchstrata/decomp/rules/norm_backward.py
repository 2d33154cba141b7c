"""Layer norm backward, group norm forward and backward.

Statistics are computed in float32 for float16/bfloat16; every output is cast to the
dtype eager gives it (read from the ATen node's metadata).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext
from torchstrata.decomp.promotion import computation_dtype
from torchstrata.decomp.table import NotDecomposable, RuleTable


def _outputs(ctx: DecompContext, values: Sequence[Node | None], mask: Sequence[bool]) -> tuple:
    metas = ctx.out_metas
    return tuple(
        ctx.cast(v, metas[i].dtype)
        if (v is not None and mask[i] and metas[i] is not None)
        else None
        for i, v in enumerate(values)
    )


def native_layer_norm_backward(
    ctx: DecompContext,
    grad: Node,
    x: Node,
    normalized_shape: Sequence[int],
    mean: Node,
    rstd: Node,
    weight: Node | None,
    bias: Node | None,
    output_mask: Sequence[bool],
) -> tuple:
    """``(d_input, d_weight, d_bias)`` of ``native_layer_norm``."""
    shape = x.tensor_meta.shape
    axis = len(shape) - len(normalized_shape)
    inner = list(range(axis, len(shape)))
    outer = list(range(axis))
    count = math.prod(shape[d] for d in inner)
    compute = computation_dtype(x.tensor_meta.dtype)
    g, xc = ctx.cast(grad, compute), ctx.cast(x, compute)
    mean_b = ctx.broadcast_to(ctx.cast(mean, compute), shape)
    rstd_b = ctx.broadcast_to(ctx.cast(rstd, compute), shape)
    x_hat = ctx.prim("mul", ctx.prim("sub", xc, mean_b), rstd_b)
    gw = g
    if weight is not None:
        gw = ctx.prim("mul", g, ctx.broadcast_to(ctx.cast(weight, compute), shape))
    d_input = d_weight = d_bias = None
    if output_mask[0]:
        if count == 0:
            raise NotDecomposable("layer norm backward over empty dims")
        sum_a = ctx.broadcast_reduced(ctx.prim("sum", gw, inner), inner, shape)
        sum_b = ctx.broadcast_reduced(
            ctx.prim("sum", ctx.prim("mul", gw, x_hat), inner), inner, shape
        )
        inner_term = ctx.prim(
            "sub",
            ctx.prim("sub", ctx.prim("mul", gw, ctx.count(count)), sum_a),
            ctx.prim("mul", x_hat, sum_b),
        )
        d_input = ctx.prim("mul", ctx.prim("div", rstd_b, ctx.count(count)), inner_term)
    if output_mask[1] and weight is not None:
        d_weight = ctx.prim("sum", ctx.prim("mul", g, x_hat), outer)
    if output_mask[2] and bias is not None:
        d_bias = ctx.prim("sum", g, outer)
    return _outputs(ctx, (d_input, d_weight, d_bias), output_mask)


def _grouped(ctx: DecompContext, x: Node, n: int, group: int) -> Node:
    return ctx.reshape(x, [n, group, x.tensor_meta.numel // max(n * group, 1)])


def native_group_norm(
    ctx: DecompContext,
    x: Node,
    weight: Node | None,
    bias: Node | None,
    n: int,
    c: int,
    hxw: int,
    group: int,
    eps: float,
) -> tuple[Node, Node, Node]:
    """``(out, mean[N, G], rstd[N, G])`` with biased variance over each group."""
    shape = x.tensor_meta.shape
    if n * c * hxw == 0:
        raise NotDecomposable("group norm of an empty tensor")
    compute = computation_dtype(x.tensor_meta.dtype)
    xg = _grouped(ctx, ctx.cast(x, compute), n, group)
    count = ctx.count(xg.tensor_meta.shape[2])
    gshape = xg.tensor_meta.shape
    mean = ctx.prim("div", ctx.prim("sum", xg, [2]), count)
    centered = ctx.prim("sub", xg, ctx.broadcast_reduced(mean, [2], gshape))
    var = ctx.prim("div", ctx.prim("sum", ctx.prim("mul", centered, centered), [2]), count)
    rstd = ctx.prim("rsqrt", ctx.prim("add", var, float(eps)))
    normed = ctx.prim("mul", centered, ctx.broadcast_reduced(rstd, [2], gshape))
    out = ctx.reshape(normed, [n, c, hxw])
    per_channel = [n, c, hxw]
    if weight is not None:
        out = ctx.prim(
            "mul", out, ctx.prim("broadcast_in_dim", ctx.cast(weight, compute), per_channel, [1])
        )
    if bias is not None:
        out = ctx.prim(
            "add", out, ctx.prim("broadcast_in_dim", ctx.cast(bias, compute), per_channel, [1])
        )
    out = ctx.reshape(out, list(shape))
    return _outputs(ctx, (out, mean, rstd), (True, True, True))


def native_group_norm_backward(
    ctx: DecompContext,
    grad: Node,
    x: Node,
    mean: Node,
    rstd: Node,
    weight: Node | None,
    n: int,
    c: int,
    hxw: int,
    group: int,
    output_mask: Sequence[bool],
) -> tuple:
    """``(d_input, d_weight, d_bias)`` of ``native_group_norm`` (eager's formulas)."""
    if n * c * hxw == 0:
        raise NotDecomposable("group norm backward of an empty tensor")
    shape = x.tensor_meta.shape
    cpg = c // group
    compute = computation_dtype(x.tensor_meta.dtype)
    g3 = ctx.reshape(ctx.cast(grad, compute), [n, c, hxw])
    x3 = ctx.reshape(ctx.cast(x, compute), [n, c, hxw])
    mean_c, rstd_c = ctx.cast(mean, compute), ctx.cast(rstd, compute)
    ds = ctx.prim("sum", ctx.prim("mul", g3, x3), [2])  # [N, C]
    db = ctx.prim("sum", g3, [2])
    d_input = d_weight = d_bias = None
    if output_mask[0]:
        w = ctx.cast(weight, compute) if weight is not None else None
        ds_w = (
            ctx.prim("mul", ds, ctx.prim("broadcast_in_dim", w, [n, c], [1]))
            if w is not None
            else ds
        )
        db_w = (
            ctx.prim("mul", db, ctx.prim("broadcast_in_dim", w, [n, c], [1]))
            if w is not None
            else db
        )
        ds_val = ctx.prim("sum", ctx.reshape(ds_w, [n, group, cpg]), [2])  # [N, G]
        db_val = ctx.prim("sum", ctx.reshape(db_w, [n, group, cpg]), [2])
        s = 1.0 / (hxw * cpg)
        c1 = ctx.prim("broadcast_in_dim", rstd_c, [n, group, cpg], [0, 1])
        if w is not None:
            c1 = ctx.prim(
                "mul",
                c1,
                ctx.prim("broadcast_in_dim", ctx.reshape(w, [group, cpg]), [n, group, cpg], [1, 2]),
            )
        rstd3 = ctx.prim("mul", ctx.prim("mul", rstd_c, rstd_c), rstd_c)
        c2 = ctx.prim(
            "mul",
            ctx.prim("mul", ctx.prim("sub", ctx.prim("mul", db_val, mean_c), ds_val), rstd3),
            s,
        )
        c3 = ctx.prim(
            "sub",
            ctx.prim("mul", ctx.prim("neg", c2), mean_c),
            ctx.prim("mul", ctx.prim("mul", db_val, rstd_c), s),
        )
        full = [n, group, cpg, hxw]
        g4 = ctx.reshape(g3, full)
        x4 = ctx.reshape(x3, full)
        dx = ctx.prim("mul", ctx.prim("broadcast_in_dim", c1, full, [0, 1, 2]), g4)
        dx = ctx.prim(
            "add", dx, ctx.prim("mul", ctx.prim("broadcast_in_dim", c2, full, [0, 1]), x4)
        )
        dx = ctx.prim("add", dx, ctx.prim("broadcast_in_dim", c3, full, [0, 1]))
        d_input = ctx.reshape(dx, list(shape))
    if output_mask[1]:
        ds3 = ctx.reshape(ds, [n, group, cpg])
        db3 = ctx.reshape(db, [n, group, cpg])
        mean3 = ctx.prim("broadcast_in_dim", mean_c, [n, group, cpg], [0, 1])
        rstd3b = ctx.prim("broadcast_in_dim", rstd_c, [n, group, cpg], [0, 1])
        term = ctx.prim("mul", ctx.prim("sub", ds3, ctx.prim("mul", db3, mean3)), rstd3b)
        d_weight = ctx.reshape(ctx.prim("sum", term, [0]), [c])
    if output_mask[2]:
        d_bias = ctx.prim("sum", db, [0])
    return _outputs(ctx, (d_input, d_weight, d_bias), output_mask)


RULES = RuleTable(
    {
        "aten.native_layer_norm_backward.default": native_layer_norm_backward,
        "aten.native_group_norm.default": native_group_norm,
        "aten.native_group_norm_backward.default": native_group_norm_backward,
    }
)
