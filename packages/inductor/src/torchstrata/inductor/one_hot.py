"""Sums of one-hot rows: ``sum(where(iota == index, v, 0), dim)`` is ``v`` where ``index`` is
in range, else 0.

Cross-entropy's backward sums its incoming gradient over the class dim, and that gradient
is one-hot (``nll_loss_backward``: ``-g / n`` at the target, 0 elsewhere): a loop of
compares and adds over every row that has exactly one term. When ``index`` and ``v`` are
constant along ``dim`` (broadcast), the sum is rewritten to the pointwise
``where(0 <= index < size, v, 0)``.
"""

from __future__ import annotations

from typing import Any

from torchstrata.core import Graph, Node, Transformer, prim

_SUM, _WHERE, _EQ = prim("sum"), prim("where"), prim("eq")
_BROADCAST, _IOTA, _FULL = prim("broadcast_in_dim"), prim("iota"), prim("full")


def _is_iota_along(node: Any, dim: int) -> bool:
    if not isinstance(node, Node) or node.op != _BROADCAST:
        return False
    source, _, dims = node.args
    if not isinstance(source, Node) or source.op != _IOTA or tuple(dims) != (dim,):
        return False
    _, start, step, *_ = source.args
    return start == 0 and step == 1


def _constant_along(node: Any, dim: int) -> tuple[Node, tuple[int, ...]] | None:
    """``(source, dims)`` of a broadcast that does not vary along ``dim``."""
    if not isinstance(node, Node) or node.op != _BROADCAST:
        return None
    source, _, dims = node.args
    if not isinstance(source, Node) or dim in tuple(dims):
        return None
    return source, tuple(dims)


def _is_zero(node: Any) -> bool:
    if isinstance(node, Node) and node.op == _BROADCAST:
        node = node.args[0]
    return isinstance(node, Node) and node.op == _FULL and node.args[1] == 0


def _match(node: Node) -> tuple[int, int, Node, tuple[int, ...], Node, tuple[int, ...]] | None:
    value, dims = node.args
    if len(dims) != 1 or not isinstance(value, Node) or value.op != _WHERE:
        return None
    dim = dims[0] % len(value.tensor_meta.shape)
    hit, picked, other = value.args
    if not isinstance(hit, Node) or hit.op != _EQ or not _is_zero(other):
        return None
    left, right = hit.args
    if _is_iota_along(right, dim):
        left, right = right, left
    index = _constant_along(right, dim)
    constant = _constant_along(picked, dim)
    if not _is_iota_along(left, dim) or index is None or constant is None:
        return None
    return dim, value.tensor_meta.shape[dim], *index, *constant


class _OneHotSums(Transformer):
    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        found = _match(node) if node.op == _SUM else None
        if found is None:
            return super().transform_node(node, args, kwargs)
        dim, size, index, index_dims, value, value_dims = found
        b, env = self.builder, self.env
        shape = node.tensor_meta.shape

        def squeezed(source: Node, dims: tuple[int, ...]) -> Node:
            kept = tuple(d if d < dim else d - 1 for d in dims)
            return b.call(_BROADCAST, env[source], shape, kept)

        where_index = squeezed(index, index_dims)
        in_range = b.call(
            prim("bitwise_and"),
            b.call(prim("ge"), where_index, 0),
            b.call(prim("lt"), where_index, size),
        )
        meta = node.tensor_meta
        zeros = b.call(_BROADCAST, b.call(_FULL, (), 0, meta.dtype, meta.device), shape, ())
        picked = squeezed(value, value_dims)
        return b.call(_WHERE, in_range, picked, zeros, name=node.name)


def one_hot_sums(graph: Graph) -> Graph:
    """``graph`` with sums of one-hot rows rewritten (see the module docstring)."""
    if not any(node.op == _SUM and _match(node) for node in graph.nodes):
        return graph
    return _OneHotSums(graph).run()
