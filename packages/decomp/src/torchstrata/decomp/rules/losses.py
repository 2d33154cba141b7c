"""nll_loss forward/backward, embedding and its backward, dropout.

``nll_loss`` picks ``-input[n, target[n]] * weight[target[n]]`` with ``prims.gather``;
targets equal to ``ignore_index`` get weight 0 (and a safe index 0). Reductions: 0 none,
1 mean (divided by the total weight), 2 sum.

``native_dropout`` (dropout on CUDA) and ``bernoulli.p`` (on CPU) draw with
``prims.rand``; the seed is a 0-dim int64 tensor drawn at run time by an extern
``aten.randint`` call (so ``torch.manual_seed`` governs it and every call gets a new
mask). ``mask = rand >= p``; ``out = x * mask / (1 - p)``.
"""

from __future__ import annotations

import torch

from torchstrata.core import Node, TensorMeta
from torchstrata.decomp.context import DecompContext
from torchstrata.decomp.promotion import computation_dtype
from torchstrata.decomp.table import NotDecomposable, RuleTable

_NONE, _MEAN, _SUM = 0, 1, 2


def _targets(ctx: DecompContext, target: Node, ignore_index: int) -> tuple[Node, Node]:
    """``(safe target, keep mask)`` with ignored targets replaced by 0."""
    keep = ctx.prim("ne", target, ignore_index)
    return ctx.where(keep, target, 0), keep


def _weights(
    ctx: DecompContext, weight: Node | None, safe: Node, keep: Node, dtype: torch.dtype
) -> Node:
    shape = safe.tensor_meta.shape
    if weight is None:
        picked = ctx.full(shape, 1.0, dtype)
    else:
        flat = ctx.reshape(safe, [safe.tensor_meta.numel])
        picked = ctx.reshape(ctx.prim("gather", ctx.cast(weight, dtype), 0, flat), list(shape))
    return ctx.where(keep, picked, 0.0)


def _check(x: Node, target: Node) -> None:
    if x.tensor_meta.ndim not in (1, 2) or target.tensor_meta.dtype is not torch.int64:
        raise NotDecomposable("nll_loss of rank > 2 or non-int64 targets")
    if x.tensor_meta.numel == 0 or target.tensor_meta.numel == 0:
        raise NotDecomposable("nll_loss of an empty batch")


def nll_loss_forward(
    ctx: DecompContext,
    x: Node,
    target: Node,
    weight: Node | None,
    reduction: int,
    ignore_index: int,
) -> tuple[Node, Node]:
    """``(loss, total_weight)``."""
    _check(x, target)
    compute = computation_dtype(x.tensor_meta.dtype)
    xc = ctx.cast(x, compute)
    safe, keep = _targets(ctx, target, ignore_index)
    if x.tensor_meta.ndim == 1:
        picked = ctx.reshape(ctx.prim("gather", xc, 0, ctx.reshape(safe, [1])), [])
    else:
        picked = ctx.reshape(
            ctx.prim("gather", xc, 1, ctx.reshape(safe, [safe.tensor_meta.numel, 1])),
            list(safe.tensor_meta.shape),
        )
    w = _weights(ctx, weight, safe, keep, compute)
    loss = ctx.prim("neg", ctx.prim("mul", picked, w))
    dims = list(range(loss.tensor_meta.ndim))
    total_weight = ctx.prim("sum", w, dims)
    if reduction == _SUM:
        loss = ctx.prim("sum", loss, dims)
    elif reduction == _MEAN:
        loss = ctx.prim("div", ctx.prim("sum", loss, dims), total_weight)
    elif reduction != _NONE:
        raise NotDecomposable(f"nll_loss reduction {reduction}")
    metas = ctx.out_metas
    if reduction == _NONE:
        total_weight = ctx.full(list(metas[1].shape), 0.0, metas[1].dtype)
    return ctx.cast(loss, metas[0].dtype), ctx.cast(total_weight, metas[1].dtype)


def nll_loss_backward(
    ctx: DecompContext,
    grad: Node,
    x: Node,
    target: Node,
    weight: Node | None,
    reduction: int,
    ignore_index: int,
    total_weight: Node,
) -> Node:
    """``d input``: ``-weight[t] * grad`` at ``[n, target[n]]`` (scaled for mean), 0 elsewhere.

    Written as ``where(iota == target, value, 0)`` rather than a scatter into zeros: a
    pointwise expression that fuses with ``log_softmax_backward`` (no zero-filled buffer,
    no extern scatter).
    """
    _check(x, target)
    compute = computation_dtype(x.tensor_meta.dtype)
    safe, keep = _targets(ctx, target, ignore_index)
    w = _weights(ctx, weight, safe, keep, compute)
    g = ctx.cast(grad, compute)
    if reduction == _MEAN:
        g = ctx.prim("div", g, ctx.cast(total_weight, compute))
    elif reduction not in (_NONE, _SUM):
        raise NotDecomposable(f"nll_loss reduction {reduction}")
    g = ctx.broadcast_to(g, w.tensor_meta.shape)
    values = ctx.prim("neg", ctx.prim("mul", w, g))
    shape = list(x.tensor_meta.shape)
    classes = ctx.iota(shape[-1])
    row_dims = list(range(len(shape) - 1))
    positions = ctx.prim("broadcast_in_dim", classes, shape, [len(shape) - 1])
    wanted = ctx.prim("broadcast_in_dim", safe, shape, row_dims)
    hit = ctx.prim("eq", positions, wanted)
    out = ctx.where(hit, ctx.prim("broadcast_in_dim", values, shape, row_dims), 0.0)
    return ctx.cast(out, ctx.out_meta.dtype)


def _row_index(ctx: DecompContext, indices: Node, width: int) -> tuple[Node, int]:
    count = indices.tensor_meta.numel
    flat = ctx.cast(ctx.reshape(indices, [count]), torch.int64)
    return ctx.prim("broadcast_in_dim", flat, [count, width], [0]), count


def embedding(
    ctx: DecompContext,
    weight: Node,
    indices: Node,
    padding_idx: int = -1,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Node:
    """Rows of ``weight`` gathered at ``indices``: shape ``[*indices.shape, D]``."""
    if weight.tensor_meta.ndim != 2:
        raise NotDecomposable("embedding of a weight that is not 2-D")
    width = weight.tensor_meta.shape[1]
    index, _ = _row_index(ctx, indices, width)
    rows = ctx.prim("gather", weight, 0, index)
    return ctx.reshape(rows, [*indices.tensor_meta.shape, width])


def embedding_dense_backward(
    ctx: DecompContext,
    grad: Node,
    indices: Node,
    num_weights: int,
    padding_idx: int,
    scale_grad_by_freq: bool,
) -> Node:
    """``scatter_add`` of the gradient rows into ``[num_weights, D]`` (padding rows zero)."""
    width = grad.tensor_meta.shape[-1]
    compute = computation_dtype(grad.tensor_meta.dtype)
    index, count = _row_index(ctx, indices, width)
    rows = ctx.reshape(ctx.cast(grad, compute), [count, width])
    flat = ctx.cast(ctx.reshape(indices, [count]), torch.int64)
    if padding_idx >= 0:
        pad = ctx.prim("broadcast_in_dim", ctx.prim("eq", flat, padding_idx), [count, width], [0])
        rows = ctx.where(pad, 0.0, rows)
    if scale_grad_by_freq:
        ones = ctx.full([count], 1.0, compute)
        counts = ctx.prim("scatter_add", ctx.full([num_weights], 0.0, compute), 0, flat, ones)
        per_row = ctx.prim("gather", counts, 0, flat)
        rows = ctx.prim("div", rows, ctx.prim("broadcast_in_dim", per_row, [count, width], [0]))
    zeros = ctx.full([num_weights, width], 0.0, compute)
    return ctx.cast(ctx.prim("scatter_add", zeros, 0, index, rows), ctx.out_meta.dtype)


def _uniform(ctx: DecompContext, meta: TensorMeta) -> Node:
    """float32 ``prims.rand`` of ``meta``'s shape, seeded by an extern ``aten.randint`` drawn
    at run time (``torch.manual_seed`` governs it; every call draws anew)."""
    seed = ctx.aten("randint.low", 0, 2**31 - 1, [], dtype=torch.int64, device=meta.device)
    return ctx.prim("rand", list(meta.shape), seed, 0, torch.float32, meta.device)


def native_dropout(ctx: DecompContext, x: Node, p: float, train: bool | None) -> tuple[Node, Node]:
    """``(x * mask / (1 - p), mask)`` with ``mask = rand >= p`` (identity when not training)."""
    meta = x.tensor_meta
    if not meta.dtype.is_floating_point:
        raise NotDecomposable("dropout of a non-float tensor")
    if train is False or p == 0:
        return x, ctx.full(list(meta.shape), True, torch.bool)
    mask = ctx.prim("ge", _uniform(ctx, meta), float(p))
    scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
    compute = computation_dtype(meta.dtype)
    kept = ctx.prim("mul", ctx.cast(mask, compute), scale)
    return ctx.cast(ctx.prim("mul", ctx.cast(x, compute), kept), meta.dtype), mask


def bernoulli_p(ctx: DecompContext, x: Node, p: float = 0.5, generator: object = None) -> Node:
    """``rand < p`` in ``x``'s dtype: ``F.dropout``'s mask on CPU (``bernoulli_`` of an
    ``empty_like``), drawn inside the kernel with our stream like ``native_dropout``'s
    (seeded by an extern ``aten.randint``, so ``torch.manual_seed`` governs it) instead of
    ATen's CPU generator, which took 29 of K6's 55 ms. A ``p`` outside [0, 1] (eager's
    error), a generator or a non-float result stay with ATen."""
    meta = ctx.out_meta
    if generator is not None or not meta.dtype.is_floating_point:
        raise NotDecomposable("bernoulli with a generator or of a non-float tensor")
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p <= 1:
        raise NotDecomposable(f"bernoulli with p={p!r} (eager raises outside [0, 1])")
    return ctx.cast(ctx.prim("lt", _uniform(ctx, meta), float(p)), meta.dtype)


def native_dropout_backward(ctx: DecompContext, grad: Node, mask: Node, scale: float) -> Node:
    """``grad * mask * scale`` (an integer ``grad`` promotes to float, like eager)."""
    dtype = ctx.out_meta.dtype
    compute = computation_dtype(dtype)
    g, m = ctx.broadcast(ctx.cast(grad, compute), ctx.cast(mask, compute))
    return ctx.cast(ctx.prim("mul", ctx.prim("mul", g, m), float(scale)), dtype)


RULES = RuleTable(
    {
        "aten.nll_loss_forward.default": nll_loss_forward,
        "aten.nll_loss_backward.default": nll_loss_backward,
        "aten.embedding.default": embedding,
        "aten.embedding_dense_backward.default": embedding_dense_backward,
        "aten.bernoulli.p": bernoulli_p,
        "aten.native_dropout.default": native_dropout,
        "aten.native_dropout_backward.default": native_dropout_backward,
    }
)
