"""A scatter of whole rows, as ATen's ``index_add``.

``embedding_dense_backward`` decomposes into ``scatter_add(a, 0, broadcast_in_dim(i, [n, w],
[0]), rows)``: row ``k`` of ``rows`` added into row ``i[k]`` of ``a``. ``prims.scatter_add``
has no lowering, so ATen ran it with the index broadcast to ``[n, w]`` and materialised by
a kernel (128 KB of int64 for 128 rows of 128), then scattered element by element: 126 us
for 128 rows into an ``[8192, 128]`` table on the CPU, where ``index_add_(0, i, rows)``
takes 11 us and needs no index kernel. So a 2-D ``scatter_add`` along dim 0 whose index is
a 1-D index broadcast along the rows becomes ``aten.index_add(a, 0, i, rows)`` (the same
sums; both check the index's range), which the launcher runs in place where it may
(:mod:`~torchstrata.inductor.launch.in_place`).
"""

from __future__ import annotations

from typing import Any

import torch

from torchstrata.core import Graph, Node, TensorMeta, Transformer, aten, prim, sizes_symbolic

_SCATTER_ADD, _BROADCAST = prim("scatter_add"), prim("broadcast_in_dim")
INDEX_ADD = aten("index_add.default")


def _row_index(node: Node) -> Node | None:
    """The 1-D index whose rows ``node`` (a ``scatter_add``) adds, when it scatters rows."""
    if node.op != _SCATTER_ADD or node.kwargs:
        return None
    a, dim, index, src = node.args
    if not (isinstance(a, Node) and isinstance(index, Node) and isinstance(src, Node)):
        return None
    shape = a.tensor_meta.shape
    if len(shape) != 2 or dim not in (0, -2) or not a.tensor_meta.dtype.is_floating_point:
        return None
    if index.op != _BROADCAST or tuple(index.args[2]) != (0,):
        return None
    rows = index.args[0]
    if not isinstance(rows, Node) or rows.tensor_meta.dtype not in (torch.int64, torch.int32):
        return None
    count = rows.tensor_meta.shape
    if len(count) != 1 or tuple(src.tensor_meta.shape) != (count[0], shape[1]):
        return None
    return rows


class _RowScatters(Transformer):
    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        rows = _row_index(node)
        if rows is None:
            return super().transform_node(node, args, kwargs)
        a, _, _, src = args
        meta = None
        if sizes_symbolic():
            # symbolic sizes (``core.SizeValue``) have no meta tensor: ATen's index_add
            # clones ``a`` keeping its layout, which is the scatter's (checked by
            # expression, deciding nothing)
            meta = node.tensor_meta
            if _layout(a.tensor_meta) != _layout(meta):
                return super().transform_node(node, args, kwargs)
        return self.builder.call(INDEX_ADD, a, 0, self.env[rows], src, meta=meta, name=node.name)


def _layout(meta: TensorMeta) -> tuple[str, ...]:
    """A tensor's shape and strides as text (sizes by expression)."""
    return (*map(str, meta.shape), "/", *map(str, meta.strides), str(meta.dtype))


def row_scatters(graph: Graph) -> Graph:
    """``graph`` with every ``scatter_add`` of whole rows along dim 0 of a 2-D float tensor
    replaced by ``aten.index_add`` (see the module docstring)."""
    if not any(_row_index(node) for node in graph.nodes):
        return graph
    return _RowScatters(graph).run()
