"""Counts in 32 bits: ``sum(convert(mask, int64))`` accumulated as int32.

PyTorch sums integers (and booleans) in int64, so counting the elements of a row that
satisfy a test (``amax``'s backward counts the row's maxima, to share the gradient
among ties) keeps a 64-bit accumulator per element of a tile: two registers and an
add-with-carry per element, in a loop that is otherwise a few float operations. A
count of fewer than 2**31 elements fits in int32 exactly, so such a sum is rewritten to
``convert(sum(convert(mask, int32)), int64)``: the same value, half the accumulator.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from torchstrata.core import Graph, Node, Transformer, prim

_SUM, _CONVERT = prim("sum"), prim("convert_element_type")


def _counted_mask(node: Node) -> Node | None:
    """The boolean mask that ``node`` counts in int64 over fewer than 2**31 elements."""
    if node.op != _SUM:
        return None
    value, dims = node.args
    if not isinstance(value, Node) or value.op != _CONVERT or value.args[1] != torch.int64:
        return None
    mask = value.args[0]
    if not isinstance(mask, Node) or mask.tensor_meta.dtype is not torch.bool:
        return None
    shape = value.tensor_meta.shape
    if math.prod(shape[d % len(shape)] for d in dims) >= 2**31:
        return None
    return mask


class _NarrowCounts(Transformer):
    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        mask = _counted_mask(node)
        if mask is None:
            return super().transform_node(node, args, kwargs)
        b = self.builder
        narrow = b.call(_CONVERT, self.env[mask], torch.int32)
        count = b.call(_SUM, narrow, node.args[1])
        return b.call(_CONVERT, count, torch.int64, name=node.name)


def narrow_counts(graph: Graph) -> Graph:
    """``graph`` with its int64 counts of boolean masks summed in int32 (see above)."""
    if not any(_counted_mask(node) for node in graph.nodes):
        return graph
    return _NarrowCounts(graph).run()
