"""Sums of one-hot rows: ``sum(where(iota == index, v, 0), dim)`` is ``v`` where ``index`` is
in range, else 0.

Cross-entropy's backward sums its incoming gradient over the class dim, and that gradient
is one-hot (``nll_loss_backward``: ``-g / n`` at the target, 0 elsewhere): a loop of
compares and adds over every row that has exactly one term. When ``index`` and ``v`` are
constant along ``dim`` (broadcast), the sum is rewritten to the pointwise
``where(0 <= index < size, v, 0)``. When ``v`` varies along ``dim`` (explicit
cross-entropy's picked logit), :func:`~torchstrata.inductor.passes.rewrites.gather_as_reduction`
reads it with a gather instead (:func:`match_one_hot_sum` finds both forms).
"""

from __future__ import annotations

from typing import Any

import attrs

from torchstrata.core import Graph, Node, Transformer, prim
from torchstrata.inductor.passes.zeros import is_zeros, zeros

_SUM, _WHERE, _EQ = prim("sum"), prim("where"), prim("eq")
_BROADCAST, _IOTA = prim("broadcast_in_dim"), prim("iota")


def broadcast_source(node: Any) -> tuple[Node, tuple[int, ...]] | None:
    """``(source, dims)`` of a chain of ``broadcast_in_dim`` ending at ``node``: dim ``k``
    of ``source`` lands on dim ``dims[k]`` of ``node`` (``x[None, :]`` then an expand is
    a chain of two)."""
    if not isinstance(node, Node) or node.op != _BROADCAST:
        return None
    source, _, dims = node.args
    dims = tuple(dims)
    while isinstance(source, Node) and source.op == _BROADCAST:
        inner, _, inner_dims = source.args
        source, dims = inner, tuple(dims[d] for d in inner_dims)
    return (source, dims) if isinstance(source, Node) else None


def _is_iota_along(node: Any, dim: int) -> bool:
    found = broadcast_source(node)
    if found is None or found[0].op != _IOTA or found[1] != (dim,):
        return False
    _, start, step, *_ = found[0].args
    return start == 0 and step == 1


def constant_along(node: Any, dim: int) -> tuple[Node, tuple[int, ...]] | None:
    """``(source, dims)`` of a broadcast (or chain of them) that does not vary along
    ``dim``: ``node`` is ``broadcast_in_dim(source, shape, dims)``."""
    found = broadcast_source(node)
    if found is None or dim in found[1]:
        return None
    return found


@attrs.frozen
class OneHotSum:
    """``sum(where(iota == index, value, 0), dim)``: ``index`` (broadcast from ``source``
    over ``index_dims``) is constant along ``dim``; ``value`` is any operand."""

    dim: int
    size: int
    source: Node
    index_dims: tuple[int, ...]
    value: Node


def match_one_hot_sum(node: Node) -> OneHotSum | None:
    """The one-hot sum that ``node`` (a ``sum`` over one dim) computes, or None."""
    if node.op != _SUM:
        return None
    value, dims = node.args
    if len(dims) != 1 or not isinstance(value, Node) or value.op != _WHERE:
        return None
    dim = dims[0] % len(value.tensor_meta.shape)
    hit, picked, other = value.args
    if not isinstance(hit, Node) or hit.op != _EQ or not is_zeros(other):
        return None
    left, right = hit.args
    if _is_iota_along(right, dim):
        left, right = right, left
    index = constant_along(right, dim)
    if not _is_iota_along(left, dim) or index is None or not isinstance(picked, Node):
        return None
    return OneHotSum(dim, value.tensor_meta.shape[dim], *index, picked)


def _match(node: Node) -> tuple[int, int, Node, tuple[int, ...], Node, tuple[int, ...]] | None:
    found = match_one_hot_sum(node)
    constant = None if found is None else constant_along(found.value, found.dim)
    if found is None or constant is None:
        return None
    return found.dim, found.size, found.source, found.index_dims, *constant


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
        zero = zeros(b, shape, meta.dtype, meta.device)
        picked = squeezed(value, value_dims)
        return b.call(_WHERE, in_range, picked, zero, name=node.name)


def one_hot_sums(graph: Graph) -> Graph:
    """``graph`` with sums of one-hot rows rewritten (see the module docstring)."""
    if not any(node.op == _SUM and _match(node) for node in graph.nodes):
        return graph
    return _OneHotSums(graph).run()
