"""Graph rewrites before lowering that turn extern-only prims into fusible ones.

``gather`` along ``dim`` with one index per row (``index.shape[dim] == 1``, the other dims
equal to the input's: cross-entropy's picked logit) becomes
``sum(where(iota == index, a, 0), dim)``: a reduction that fuses with whatever computes
``a`` (log-softmax), instead of materialising ``a`` for an ATen gather. Exactly one term is
non-zero, so the sum is exact. Unlike ``torch.gather``, an out-of-range index gives 0
rather than an error (NaN where the pick reads a leaf in memory: an indirect load).

The gather is first pushed through pointwise prims (``gather(x - m - log(s))`` is
``gather(x) - m - log(s)`` when ``m`` and ``s`` are broadcast along ``dim``), so the sum
reads the leaves (cross-entropy's logits), not a value that the reductions of its own row
define: the picked logit joins the max and the sum of exponentials in one pass.

The same pick written out, ``sum(where(iota == t, v, 0), dim)`` with ``v`` varying along
``dim`` (cross-entropy spelled by hand), is read the same way: ``v`` is pushed down to its
leaves and picked at ``t`` clamped into range, then ``where(0 <= t < size, picked, 0)``.
A leaf in memory then costs one element per row, not a compare and an add per element.
The sum adds exact zeros to the picked value, so ``+ 0.0`` gives it the same sign of zero.
"""

from __future__ import annotations

from typing import Any

import torch

from torchstrata.core import Graph, GraphBuilder, Node, OpKind, Transformer, get_prim, prim
from torchstrata.inductor.passes.one_hot import OneHotSum, constant_along, match_one_hot_sum
from torchstrata.inductor.passes.zeros import zeros

_GATHER = prim("gather")
_BROADCAST = prim("broadcast_in_dim")


def _one_per_row(node: Node) -> bool:
    a, dim, index = node.args
    if not (isinstance(a, Node) and isinstance(index, Node) and isinstance(dim, int)):
        return False
    shape, index_shape = a.tensor_meta.shape, index.tensor_meta.shape
    dtype = a.tensor_meta.dtype
    if len(shape) != len(index_shape) or dtype is torch.bool or dtype.is_complex:
        return False
    dim %= len(shape)
    others = all(
        i == s for d, (i, s) in enumerate(zip(index_shape, shape, strict=True)) if d != dim
    )
    return index_shape[dim] == 1 and shape[dim] > 0 and others


def _varying_one_hot(node: Node) -> OneHotSum | None:
    """The one-hot sum ``node`` computes when its picked value varies along the dim."""
    found = match_one_hot_sum(node)
    if found is None:
        return None
    dtype = found.value.tensor_meta.dtype
    if dtype is torch.bool or dtype.is_complex or found.size == 0:
        return None
    if constant_along(found.value, found.dim) is not None:
        return None  # constant along the dim: one_hot_sums' pointwise form
    return found


class _GatherAsReduction(Transformer):
    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        one_hot = _varying_one_hot(node)
        if one_hot is not None:
            return self._pick_one_hot(node, one_hot)
        if node.op != _GATHER or not _one_per_row(node):
            return super().transform_node(node, args, kwargs)
        b = self.builder
        a, dim, index = args
        meta = a.tensor_meta
        dim %= len(meta.shape)
        if index.tensor_meta.dtype is not torch.int64:
            index = b.call(prim("convert_element_type"), index, torch.int64)
        iota = b.call(prim("iota"), meta.shape[dim], 0, 1, torch.int64, meta.device)
        positions = b.call(_BROADCAST, iota, meta.shape, (dim,))
        wanted = b.call(_BROADCAST, index, meta.shape, tuple(range(len(meta.shape))))
        hit = b.call(prim("eq"), positions, wanted)
        return _Picker(b, dim, node.tensor_meta.shape, hit, index).pick(a)

    def _pick_one_hot(self, node: Node, found: OneHotSum) -> Node:
        b, env = self.builder, self.env
        full = found.value.tensor_meta
        kept = tuple(1 if d == found.dim else size for d, size in enumerate(full.shape))
        index = b.call(_BROADCAST, env[found.source], kept, found.index_dims)
        if index.tensor_meta.dtype is not torch.int64:
            index = b.call(prim("convert_element_type"), index, torch.int64)
        in_range = b.call(
            prim("bitwise_and"), b.call(prim("ge"), index, 0), b.call(prim("lt"), index, found.size)
        )
        safe = b.call(prim("where"), in_range, index, zeros(b, kept, torch.int64, full.device))
        iota = b.call(prim("iota"), found.size, 0, 1, torch.int64, full.device)
        positions = b.call(_BROADCAST, iota, full.shape, (found.dim,))
        hit = b.call(
            prim("eq"), positions, b.call(_BROADCAST, safe, full.shape, tuple(range(len(kept))))
        )
        picked = _Picker(b, found.dim, kept, hit, safe).pick(env[found.value])
        picked = b.call(prim("where"), in_range, picked, zeros(b, kept, full.dtype, full.device))
        if full.dtype.is_floating_point:
            picked = b.call(prim("add"), picked, 0.0)
        return b.call(prim("reshape"), picked, node.tensor_meta.shape, name=node.name)


class _Picker:
    """Builds ``gather(value, dim, index)`` for one index per row, pushed through pointwise
    prims down to the leaves: a leaf in memory (an input, an extern result) keeps a gather
    of one element per row (an indirect load in the kernel for float leaves, an ATen gather
    for others, see :func:`~torchstrata.inductor.schedule.lowering.lower_node`); a computed leaf
    becomes ``sum(where(hit, leaf, 0), dim)``."""

    def __init__(
        self, builder: GraphBuilder, dim: int, shape: tuple[int, ...], hit: Node, index: Node
    ) -> None:
        self.builder = builder
        self.dim = dim
        self.shape = shape
        self.hit = hit
        self.index = index
        self.memo: dict[Node, Node] = {}

    def pick(self, value: Node) -> Node:
        """``value`` at the picked position of every row, shaped like the index."""
        picked = self.memo.get(value)
        if picked is None:
            picked = self.memo[value] = self._pick(value)
        return picked

    def _pick(self, value: Node) -> Node:
        b, meta = self.builder, value.tensor_meta
        if value.op == _BROADCAST:
            operand, _, dims = value.args
            dims = tuple(dims)
            if self.dim not in dims or operand.tensor_meta.shape[dims.index(self.dim)] == 1:
                return b.call(_BROADCAST, operand, self.shape, dims)  # constant along dim
        elif _is_elementwise(value) and all(
            arg.tensor_meta.shape == meta.shape for arg in value.args if isinstance(arg, Node)
        ):
            operands = [self.pick(arg) if isinstance(arg, Node) else arg for arg in value.args]
            assert value.op is not None
            return b.call(value.op, *operands, **dict(value.kwargs))
        if value.op is None or value.op.kind is OpKind.ATEN:
            # A leaf already in memory (an input, an extern result): one element per row is
            # read by a gather (an indirect load), not a compare-and-add over the whole row.
            return b.call(_GATHER, value, self.dim, self.index)
        # sum has no bool form: a bool leaf is summed as int32 (one hit per row: 0 or 1).
        dtype = torch.int32 if meta.dtype is torch.bool else meta.dtype
        if dtype is not meta.dtype:
            value = b.call(prim("convert_element_type"), value, dtype)
        masked = b.call(prim("where"), self.hit, value, zeros(b, meta.shape, dtype, meta.device))
        total = b.call(prim("sum"), masked, (self.dim,))
        if dtype is not meta.dtype:
            total = b.call(prim("convert_element_type"), total, meta.dtype)
        kept = tuple(d for d in range(len(meta.shape)) if d != self.dim)
        return b.call(_BROADCAST, total, self.shape, kept)


def _is_elementwise(node: Node) -> bool:
    op = node.op
    return op is not None and op.kind is OpKind.PRIMS and get_prim(op.name).is_elementwise


def gather_as_reduction(graph: Graph) -> Graph:
    """``graph`` with one-index-per-row gathers rewritten (see the module docstring)."""
    if not any(
        (node.op == _GATHER and _one_per_row(node)) or _varying_one_hot(node) is not None
        for node in graph.nodes
    ):
        return graph
    return _GatherAsReduction(graph).run()
