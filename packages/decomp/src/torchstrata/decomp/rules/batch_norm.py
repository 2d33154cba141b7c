"""Batch norm forward (every overload eager dispatches to) and backward.

Channels are dim 1; statistics reduce every other dim, in float32 for half inputs.
In training the saved ``mean``/``invstd`` are the batch statistics (biased variance);
``_native_batch_norm_legit_functional`` also returns the updated running statistics
(unbiased variance, ``momentum`` blend) instead of writing them in place.
"""

from __future__ import annotations

from collections.abc import Sequence

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext
from torchstrata.decomp.promotion import computation_dtype
from torchstrata.decomp.rules.norm_backward import _outputs
from torchstrata.decomp.table import NotDecomposable, RuleTable


def _per_channel(ctx: DecompContext, v: Node, shape: Sequence[int], dtype) -> Node:
    return ctx.prim("broadcast_in_dim", ctx.cast(v, dtype), list(shape), [1])


def _forward(
    ctx: DecompContext,
    x: Node,
    weight: Node | None,
    bias: Node | None,
    running_mean: Node | None,
    running_var: Node | None,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[Node, Node, Node, Node | None, Node | None]:
    shape = x.tensor_meta.shape
    if len(shape) < 2 or x.tensor_meta.numel == 0:
        raise NotDecomposable("batch norm needs a non-empty input of rank >= 2")
    dims = [d for d in range(len(shape)) if d != 1]
    count = x.tensor_meta.numel // shape[1]
    compute = computation_dtype(x.tensor_meta.dtype)
    xc = ctx.cast(x, compute)
    new_mean = new_var = None
    if training:
        mean = ctx.prim("div", ctx.prim("sum", xc, dims), ctx.count(count))
        centered = ctx.prim("sub", xc, ctx.broadcast_reduced(mean, dims, shape))
        squares = ctx.prim("sum", ctx.prim("mul", centered, centered), dims)
        var = ctx.prim("div", squares, ctx.count(count))
        invstd = ctx.prim("rsqrt", ctx.prim("add", var, float(eps)))
        if running_mean is not None and running_var is not None:
            rm, rv = ctx.cast(running_mean, compute), ctx.cast(running_var, compute)
            unbiased = ctx.prim("div", squares, ctx.count(max(count - 1, 1)))
            new_mean = ctx.prim(
                "add", ctx.prim("mul", rm, 1 - momentum), ctx.prim("mul", mean, momentum)
            )
            new_var = ctx.prim(
                "add", ctx.prim("mul", rv, 1 - momentum), ctx.prim("mul", unbiased, momentum)
            )
    else:
        if running_mean is None or running_var is None:
            raise NotDecomposable("batch norm in eval mode without running statistics")
        mean = ctx.cast(running_mean, compute)
        invstd = ctx.prim("rsqrt", ctx.prim("add", ctx.cast(running_var, compute), float(eps)))
        centered = ctx.prim("sub", xc, _per_channel(ctx, mean, shape, compute))
    out = ctx.prim("mul", centered, _per_channel(ctx, invstd, shape, compute))
    if weight is not None:
        out = ctx.prim("mul", out, _per_channel(ctx, weight, shape, compute))
    if bias is not None:
        out = ctx.prim("add", out, _per_channel(ctx, bias, shape, compute))
    if not training:  # eager saves empty statistics in eval mode
        empty = ctx.full([0], 0, compute)
        mean = invstd = empty
    return out, mean, invstd, new_mean, new_var


def _cpu_stats(ctx: DecompContext, x: Node, outputs: tuple) -> tuple:
    """On CPU eager's kernel saves half-precision statistics in the input dtype (the meta
    function, and CUDA, say float32): follow the kernel of the device."""
    if x.tensor_meta.device.type != "cpu":
        return outputs
    dtype = x.tensor_meta.dtype
    return tuple(
        ctx.cast(v, dtype) if i in (1, 2) and v is not None else v for i, v in enumerate(outputs)
    )


def native_batch_norm(
    ctx: DecompContext, x, weight, bias, running_mean, running_var, training, momentum, eps
) -> tuple:
    """``(out, save_mean, save_invstd)`` (running statistics are not written back here)."""
    if training and running_mean is not None:
        raise NotDecomposable("native_batch_norm with in-place running statistics")
    out, mean, invstd, _, _ = _forward(
        ctx, x, weight, bias, running_mean, running_var, training, momentum, eps
    )
    return _cpu_stats(ctx, x, _outputs(ctx, (out, mean, invstd), (True, True, True)))


def legit_functional(
    ctx: DecompContext, x, weight, bias, running_mean, running_var, training, momentum, eps
) -> tuple:
    """``(out, save_mean, save_invstd, new_running_mean, new_running_var)``."""
    out, mean, invstd, new_mean, new_var = _forward(
        ctx, x, weight, bias, running_mean, running_var, training, momentum, eps
    )
    if new_mean is None:
        new_mean, new_var = running_mean, running_var
    return _cpu_stats(ctx, x, _outputs(ctx, (out, mean, invstd, new_mean, new_var), (True,) * 5))


def batch_norm_with_update_functional(
    ctx: DecompContext, x, weight, bias, running_mean, running_var, momentum, eps
) -> tuple:
    """``(out, save_mean, save_invstd, reserve, new_running_mean, new_running_var)``;
    ``reserve`` is eager's empty uint8 buffer."""
    out, mean, invstd, new_mean, new_var = _forward(
        ctx, x, weight, bias, running_mean, running_var, True, momentum, eps
    )
    reserve_meta = ctx.out_metas[3]
    reserve = ctx.full(list(reserve_meta.shape), 0, reserve_meta.dtype)
    values = (out, mean, invstd, reserve, new_mean, new_var)
    return _cpu_stats(ctx, x, _outputs(ctx, values, (True,) * 6))


def legit_no_training(
    ctx: DecompContext, x, weight, bias, running_mean, running_var, momentum, eps
) -> tuple:
    """Eval mode with running statistics."""
    return native_batch_norm(ctx, x, weight, bias, running_mean, running_var, False, momentum, eps)


def legit_no_stats(ctx: DecompContext, x, weight, bias, training, momentum, eps) -> tuple:
    """Training mode without running statistics."""
    if not training:
        raise NotDecomposable("batch norm in eval mode without running statistics")
    return native_batch_norm(ctx, x, weight, bias, None, None, True, momentum, eps)


def native_batch_norm_backward(
    ctx: DecompContext,
    grad: Node,
    x: Node,
    weight: Node | None,
    running_mean: Node | None,
    running_var: Node | None,
    save_mean: Node | None,
    save_invstd: Node | None,
    train: bool,
    eps: float,
    output_mask: Sequence[bool],
) -> tuple:
    """``(d_input, d_weight, d_bias)`` with eager's formulas (batch stats when ``train``)."""
    shape = x.tensor_meta.shape
    if len(shape) < 2 or x.tensor_meta.numel == 0:
        raise NotDecomposable("batch norm backward needs a non-empty input of rank >= 2")
    compute = computation_dtype(x.tensor_meta.dtype)
    dims = [d for d in range(len(shape)) if d != 1]
    count = ctx.count(x.tensor_meta.numel // shape[1])
    if train:
        if save_mean is None or save_invstd is None:
            raise NotDecomposable("training backward without saved statistics")
        mean, invstd = ctx.cast(save_mean, compute), ctx.cast(save_invstd, compute)
    else:
        if running_mean is None or running_var is None:
            raise NotDecomposable("eval backward without running statistics")
        mean = ctx.cast(running_mean, compute)
        invstd = ctx.prim("rsqrt", ctx.prim("add", ctx.cast(running_var, compute), float(eps)))
    g, xc = ctx.cast(grad, compute), ctx.cast(x, compute)
    centered = ctx.prim("sub", xc, _per_channel(ctx, mean, shape, compute))
    grad_sum = ctx.prim("sum", g, dims)
    dot = ctx.prim("sum", ctx.prim("mul", g, centered), dims)
    scale = invstd if weight is None else ctx.prim("mul", invstd, ctx.cast(weight, compute))
    d_input = None
    if output_mask[0]:
        if train:
            proj_scale = ctx.prim(
                "mul", ctx.prim("div", dot, count), ctx.prim("mul", invstd, invstd)
            )
            proj = ctx.prim("mul", centered, _per_channel(ctx, proj_scale, shape, compute))
            grad_mean = _per_channel(ctx, ctx.prim("div", grad_sum, count), shape, compute)
            d_input = ctx.prim("sub", ctx.prim("sub", g, proj), grad_mean)
            d_input = ctx.prim("mul", d_input, _per_channel(ctx, scale, shape, compute))
        else:
            d_input = ctx.prim("mul", g, _per_channel(ctx, scale, shape, compute))
    d_weight = ctx.prim("mul", dot, invstd) if output_mask[1] else None
    d_bias = grad_sum if output_mask[2] else None
    return _outputs(ctx, (d_input, d_weight, d_bias), output_mask)


RULES = RuleTable(
    {
        "aten.native_batch_norm.default": native_batch_norm,
        "aten._native_batch_norm_legit_functional.default": legit_functional,
        "aten._native_batch_norm_legit_no_training.default": legit_no_training,
        "aten._batch_norm_with_update_functional.default": batch_norm_with_update_functional,
        "aten._native_batch_norm_legit.no_stats": legit_no_stats,
        "aten.native_batch_norm_backward.default": native_batch_norm_backward,
    }
)
