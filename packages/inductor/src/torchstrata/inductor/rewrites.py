"""Graph rewrites before lowering that turn extern-only prims into fusible ones.

``gather`` along ``dim`` with one index per row (``index.shape[dim] == 1``, the other dims
equal to the input's: cross-entropy's picked logit) becomes
``sum(where(iota == index, a, 0), dim)``: a reduction that fuses with whatever computes
``a`` (log-softmax), instead of materialising ``a`` for an ATen gather. Exactly one term is
non-zero, so the sum is exact. Unlike ``torch.gather``, an out-of-range index gives 0
rather than an error.

The gather is first pushed through pointwise prims (``gather(x - m - log(s))`` is
``gather(x) - m - log(s)`` when ``m`` and ``s`` are broadcast along ``dim``), so the sum
reads the leaves (cross-entropy's logits), not a value that the reductions of its own row
define: the picked logit joins the max and the sum of exponentials in one pass.
"""

from __future__ import annotations

from typing import Any

import torch

from torchstrata.core import Graph, GraphBuilder, Node, OpKind, Transformer, get_prim, prim

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


class _GatherAsReduction(Transformer):
    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
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


class _Picker:
    """Builds ``gather(value, dim, index)`` for one index per row, pushed through pointwise
    prims down to the leaves: a leaf in memory (an input, an extern result) keeps an ATen
    gather of one element per row; a computed leaf becomes ``sum(where(hit, leaf, 0), dim)``."""

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
            # read by an ATen gather, not a compare-and-add over the whole row in the kernel.
            return b.call(_GATHER, value, self.dim, self.index)
        # sum has no bool form: a bool leaf is summed as int32 (one hit per row: 0 or 1).
        dtype = torch.int32 if meta.dtype is torch.bool else meta.dtype
        if dtype is not meta.dtype:
            value = b.call(prim("convert_element_type"), value, dtype)
        zero = b.call(prim("full"), (), 0, dtype, meta.device)
        zeros = b.call(_BROADCAST, zero, meta.shape, ())
        total = b.call(prim("sum"), b.call(prim("where"), self.hit, value, zeros), (self.dim,))
        if dtype is not meta.dtype:
            total = b.call(prim("convert_element_type"), total, meta.dtype)
        kept = tuple(d for d in range(len(meta.shape)) if d != self.dim)
        return b.call(_BROADCAST, total, self.shape, kept)


def _is_elementwise(node: Node) -> bool:
    op = node.op
    return op is not None and op.kind is OpKind.PRIMS and get_prim(op.name).is_elementwise


def gather_as_reduction(graph: Graph) -> Graph:
    """``graph`` with one-index-per-row gathers rewritten (see the module docstring)."""
    if not any(node.op == _GATHER and _one_per_row(node) for node in graph.nodes):
        return graph
    return _GatherAsReduction(graph).run()
