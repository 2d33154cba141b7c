"""Graph rewrites before lowering that turn extern-only prims into fusible ones.

``gather`` along ``dim`` with one index per row (``index.shape[dim] == 1``, the other dims
equal to the input's: cross-entropy's picked logit) becomes
``sum(where(iota == index, a, 0), dim)``: a reduction that fuses with whatever computes
``a`` (log-softmax), instead of materialising ``a`` for an ATen gather. Exactly one term is
non-zero, so the sum is exact. Unlike ``torch.gather``, an out-of-range index gives 0
rather than an error.
"""

from __future__ import annotations

from typing import Any

import torch

from torchstrata.core import Graph, Node, Transformer, prim

_GATHER = prim("gather")


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
        ndim = len(meta.shape)
        dim %= ndim
        iota = b.call(prim("iota"), meta.shape[dim], 0, 1, torch.int64, meta.device)
        positions = b.call(prim("broadcast_in_dim"), iota, meta.shape, (dim,))
        if index.tensor_meta.dtype is not torch.int64:
            index = b.call(prim("convert_element_type"), index, torch.int64)
        wanted = b.call(prim("broadcast_in_dim"), index, meta.shape, tuple(range(ndim)))
        hit = b.call(prim("eq"), positions, wanted)
        zero = b.call(prim("full"), (), 0, meta.dtype, meta.device)
        zeros = b.call(prim("broadcast_in_dim"), zero, meta.shape, ())
        total = b.call(prim("sum"), b.call(prim("where"), hit, a, zeros), (dim,))
        kept = tuple(d for d in range(ndim) if d != dim)
        return b.call(prim("broadcast_in_dim"), total, node.tensor_meta.shape, kept, name=node.name)


def gather_as_reduction(graph: Graph) -> Graph:
    """``graph`` with one-index-per-row gathers rewritten (see the module docstring)."""
    if not any(node.op == _GATHER and _one_per_row(node) for node in graph.nodes):
        return graph
    return _GatherAsReduction(graph).run()
