"""Two-level sums over long leading dims (column sums such as a weight gradient).

``sum(v, leading dims)`` of ``v: [M, *rest]`` makes a kernel whose rows are the ``rest``
columns, each walking all ``M`` rows: with few columns, too few programs to fill a GPU.
For ``M >= MIN_LENGTH`` it becomes ``sum(sum(reshape(v, [S, M / S, *rest]), (1,)), (0,))``
with about ``CHUNK`` rows per part: the first kernel has ``S`` times more rows (and the
same fused prologue), the second adds ``S`` partial sums per column. Partial sums of
float16/bfloat16 values are kept in float32, so the result is rounded once, as before.

When the graph also reduces the same ``[M, *rest]`` domain along its rows (a norm's
backward: ``dx`` sums ``dy * w`` per row, ``dw`` sums ``dy * xhat`` per column), the first
level will join that row kernel (``partials.py``), one program per part: parts of
``HOSTED_CHUNK`` rows then give the row kernel enough programs. A column sum with no such
host keeps parts of ``CHUNK`` rows, which a kernel of its own walks faster (H200: 106 us
against 125 for ``[16384, 4096]``, bench/results/2026-11-30-h200-partials.txt).

A length with no divisor near the chunk (a prime such as 100003, or twice one) is padded:
zero rows are concatenated to the next multiple of the part size, which adds nothing to a
sum. Without it such a column sum ran one program per block of columns down every row
(H100, LayerNorm training at ``[100003, 96]`` fp16: 4.6 ms against torch.compile's 0.8).
The padded domain differs from the row kernel's, so those parts take ``CHUNK`` rows and a
kernel of their own.

A length that is a size of a symbolic lowering (``core.SizeValue``: a weight gradient's
rows in a training graph lowered once for many batch sizes, decision 0440) has no divisor
to look for: from ``MIN_LENGTH`` on (a condition of the lowering) it is always padded, to
``(length // CHUNK + 1) * CHUNK`` rows (between 1 and ``CHUNK`` zero rows, never 0: a
``full`` of no rows at some sizes would be another graph), so the number of parts is an
expression of the sizes, computed per call like every other size of the lowering.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from torchstrata.core import Graph, Node, SizeValue, Transformer, prim
from torchstrata.inductor.codegen.triton.partials import MAX_ROW

MIN_LENGTH = 2048  # split sums over at least this many rows
CHUNK = 1024  # rows per partial sum of a column sum with a kernel of its own
HOSTED_CHUNK = 64  # rows per partial sum joining a row kernel (one program: partials.py)
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
    if _normalised(dims, len(shape)) != list(range(count)) or count >= len(shape):
        return None
    return math.prod(shape[:count]), math.prod(shape[count:])


def _normalised(dims: Any, rank: int) -> list[int]:
    """``dims`` as sorted non-negative dims of a value of ``rank`` dims."""
    return sorted(d % max(rank, 1) for d in dims)


def parts_for(length: int, chunk: int = CHUNK) -> int:
    """The number of parts of a sum over ``length`` rows, about ``chunk`` rows each (a
    divisor of ``length``; 1: no split)."""
    if length < MIN_LENGTH:
        return 1
    for parts in range(length // chunk, 1, -1):
        if length % parts == 0:
            return parts
    return 1


def split_plan(length: int | SizeValue, chunk: int = CHUNK) -> tuple[Any, Any]:
    """``(parts, padding)`` of a sum over ``length`` rows: a divisor of ``length`` whose
    parts hold at most ``2 * chunk`` rows and no padding, else ``CHUNK``-row parts over
    ``length`` padded with zero rows (module docstring); ``(1, 0)``: no split. A symbolic
    ``length`` records whether it is below ``MIN_LENGTH`` and, from there on, is padded
    to one more part than it fills (``parts`` and ``padding`` expressions of it)."""
    if isinstance(length, SizeValue):
        if length < MIN_LENGTH:
            return 1, 0
        parts = length // CHUNK + 1
        return parts, parts * CHUNK - length
    parts = parts_for(length, chunk)
    if length < MIN_LENGTH or (parts > 1 and length // parts <= 2 * chunk):
        return parts, 0
    parts = -(-length // CHUNK)
    size = -(-length // parts)
    return parts, parts * size - length


def _row_reduced(graph: Graph) -> set[tuple[int, ...]]:
    """Shapes of the values that a sum reduces along trailing dims, rows short enough to
    host column partial sums (``partials.MAX_ROW``)."""
    shapes = set()
    for node in graph.nodes:
        if node.op != _SUM or not isinstance(node.args[0], Node):
            continue
        shape = tuple(node.args[0].tensor_meta.shape)
        dims = _normalised(node.args[1], len(shape))
        trailing = list(range(len(shape) - len(dims), len(shape)))
        row = math.prod(shape[len(shape) - len(dims) :])
        if dims and dims == trailing and len(dims) < len(shape) and row <= MAX_ROW:
            shapes.add(shape)
    return shapes


class _SplitSums(Transformer):
    def __init__(self, graph: Graph, partials: bool) -> None:
        super().__init__(graph)
        self.hosted = _row_reduced(graph) if partials else set()

    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        found = _leading(node) if node.op == _SUM else None
        parts, padding = 1, 0
        if found and found[1] <= MAX_COLUMNS:
            hosted = tuple(node.args[0].tensor_meta.shape) in self.hosted
            parts, padding = split_plan(found[0], HOSTED_CHUNK if hosted else CHUNK)
        if found is None or parts == 1:
            return super().transform_node(node, args, kwargs)
        b = self.builder
        value, dims = args
        meta = value.tensor_meta
        dtype = meta.dtype
        if dtype in _HALF:
            value = b.call(prim("convert_element_type"), value, torch.float32)
        rest = list(meta.shape[len(dims) :])
        if padding:
            rows = b.call(prim("reshape"), value, [found[0], *rest])
            wide = torch.float32 if dtype in _HALF else dtype
            zeros = b.call(prim("full"), [padding, *rest], 0.0, wide, meta.device)
            value = b.call(prim("cat"), [rows, zeros], 0)
        length = found[0] + padding
        size = CHUNK if type(parts) is SizeValue else length // parts
        split = b.call(prim("reshape"), value, [parts, size, *rest])
        total = b.call(_SUM, b.call(_SUM, split, (1,)), (0,))
        if dtype in _HALF:
            total = b.call(prim("convert_element_type"), total, dtype)
        return total


def split_long_sums(graph: Graph, partials: bool = True) -> Graph:
    """``graph`` with long sums over leading dims done in two levels (module docstring);
    ``partials``: a row kernel will host the first level (``InductorOptions.partials``)."""
    if not any(node.op == _SUM and _leading(node) for node in graph.nodes):
        return graph
    return _SplitSums(graph, partials).run()
