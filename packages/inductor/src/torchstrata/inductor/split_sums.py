"""Two-level sums over long leading dims (column sums such as a weight gradient).

``sum(v, leading dims)`` of ``v: [M, *rest]`` makes a kernel whose rows are the ``rest``
columns, each walking all ``M`` rows: with few columns, too few programs to fill a GPU.
For ``M >= MIN_LENGTH`` it becomes ``sum(sum(reshape(v, [S, M / S, *rest]), (1,)), (0,))``
with about ``CHUNK`` rows per part: the first kernel has ``S`` times more rows (and the
same fused prologue), the second adds ``S`` partial sums per column. Partial sums of
float16/bfloat16 values are kept in float32, so the result is rounded once, as before.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from torchstrata.core import Graph, Node, Transformer, prim

MIN_LENGTH = 2048  # split sums over at least this many rows
CHUNK = 64  # rows per partial sum (one program of a kernel with partials: partials.py)
MAX_COLUMNS = 65536  # wider sums already have enough rows (columns) per kernel

_SUM = prim("sum")
_HALF = (torch.float16, torch.bfloat16)


def _leading(node: Node) -> tuple[int, int] | None:
    """``(M, columns)`` if ``node`` sums leading dims of a floating value, else None."""
    value, dims = node.args
    if not isinstance(value, Node) or not value.tensor_meta.dtype.is_floating_point:
        return None
    shape = value.tensor_meta.shape
    count = len(dims)
    if sorted(d % max(len(shape), 1) for d in dims) != list(range(count)) or count >= len(shape):
        return None
    return math.prod(shape[:count]), math.prod(shape[count:])


def parts_for(length: int) -> int:
    """The number of parts of a sum over ``length`` rows (a divisor of it; 1: no split)."""
    if length < MIN_LENGTH:
        return 1
    for parts in range(length // CHUNK, 1, -1):
        if length % parts == 0:
            return parts
    return 1


class _SplitSums(Transformer):
    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        found = _leading(node) if node.op == _SUM else None
        parts = parts_for(found[0]) if found and found[1] <= MAX_COLUMNS else 1
        if found is None or parts == 1:
            return super().transform_node(node, args, kwargs)
        b = self.builder
        value, dims = args
        meta = value.tensor_meta
        dtype = meta.dtype
        if dtype in _HALF:
            value = b.call(prim("convert_element_type"), value, torch.float32)
        rest = list(meta.shape[len(dims) :])
        split = b.call(prim("reshape"), value, [parts, found[0] // parts, *rest])
        total = b.call(_SUM, b.call(_SUM, split, (1,)), (0,))
        if dtype in _HALF:
            total = b.call(prim("convert_element_type"), total, dtype)
        return total


def split_long_sums(graph: Graph) -> Graph:
    """``graph`` with long sums over leading dims done in two levels (module docstring)."""
    if not any(node.op == _SUM and _leading(node) for node in graph.nodes):
        return graph
    return _SplitSums(graph).run()
