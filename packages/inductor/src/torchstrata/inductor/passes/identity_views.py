"""Views that undo each other, dropped: ``permute(permute(x, p), q)`` with ``q`` undoing ``p``.

The backward of ``x @ w.t()`` gives ``w``'s gradient as ``t(t(mm(...)))``: as a graph
output it was a kernel that copied the matmul's result into a buffer of the same layout,
once per weight of every layer. When the composed permutation is the identity and the
outer view has the inner operand's shape and strides, the outer view stands for the
operand itself (never a graph input: an output would then be the caller's tensor).
"""

from __future__ import annotations

from typing import Any

from torchstrata.core import Graph, Node, Transformer, prim

_PERMUTE = prim("permute")


def _undone(node: Node) -> Node | None:
    """The operand of the inner permute, when ``node`` is a permute that undoes it."""
    if node.op != _PERMUTE:
        return None
    inner = node.args[0]
    if not isinstance(inner, Node) or inner.op != _PERMUTE:
        return None
    base = inner.args[0]
    outer, first = node.args[1], inner.args[1]
    if not isinstance(base, Node) or base.is_input:  # an input is never returned as is
        return None
    if any(first[outer[i]] != i for i in range(len(outer))):
        return None
    meta, base_meta = node.tensor_meta, base.tensor_meta
    if meta.shape != base_meta.shape or meta.strides != base_meta.strides:
        return None
    if meta.dtype != base_meta.dtype:
        return None
    return base


class _DropIdentityViews(Transformer):
    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        base = _undone(node)
        if base is None:
            return super().transform_node(node, args, kwargs)
        return self.env[base]


def drop_identity_views(graph: Graph) -> Graph:
    """``graph`` with every permute that undoes the permute it reads replaced by that
    permute's operand (see the module docstring)."""
    if not any(_undone(node) for node in graph.nodes):
        return graph
    return _DropIdentityViews(graph).run()
