"""Grouped-query attention on the CPU without copies of repeated key/value heads
(decision 0232).

Llama-style code repeats each key/value head for its group of query heads before
attention (``repeat_kv``: ``kv[:, :, None].expand(b, h, r, t, d).reshape(b, h * r, t, d)``).
The reshape of the expanded value is a copy: a kernel writing ``r`` times the cache, for
K and for V, every call (a decode step over a 2048-long cache: 4 MB per layer). ATen's CPU
flash attention (``_scaled_dot_product_flash_attention_for_cpu``) takes key and value with
fewer heads than the query and gives query head ``i`` the key/value head ``i // r``, the
same numbers as on the repeated operands (what ``enable_gqa=True`` calls). So when both
the key and the value operand are such a repeat of a ``[b, h, t, d]`` value, with the same
``r``, the attention reads those values; the copies are left to dead-code elimination
(a training graph that saves them for the backward still makes them).
"""

from __future__ import annotations

from typing import Any

from torchstrata.core import Graph, Node, Transformer, prim

_ATTENTION = "aten._scaled_dot_product_flash_attention_for_cpu.default"
_RESHAPE = prim("reshape")
_BROADCAST = prim("broadcast_in_dim")
_MUL = prim("mul")


def _peel_copy(node: Node) -> Node:
    """The operand of an exact copy (``prims.mul(x, 1)``, a decomposed ``clone``)."""
    operand = node.args[0] if node.op == _MUL else None
    if isinstance(operand, Node) and node.args[1] == 1:
        return operand if operand.tensor_meta.dtype == node.tensor_meta.dtype else node
    return node


def repeated_heads(node: Any) -> tuple[Node, int] | None:
    """``(kv, r)`` when ``node`` (``[b, h * r, t, d]``) is ``kv`` (``[b, h, t, d]``) with
    each head repeated ``r`` times in a row (head ``i`` is ``kv``'s head ``i // r``)."""
    if not isinstance(node, Node) or node.op != _RESHAPE or node.tensor_meta is None:
        return None
    shape = node.tensor_meta.shape
    expanded = _peel_copy(node.args[0])
    if len(shape) != 4 or expanded.op != _BROADCAST:
        return None
    if expanded.tensor_meta is None or len(expanded.tensor_meta.shape) != 5:
        return None
    b, h, r, t, d = expanded.tensor_meta.shape
    if (b, h * r, t, d) != tuple(shape):
        return None
    source = expanded
    while source.op == _BROADCAST:
        operand, dims = source.args[0], list(source.args[2])
        if not isinstance(operand, Node):
            return None
        operand_shape = tuple(operand.tensor_meta.shape)
        if operand_shape == (b, h, t, d) and dims == [0, 1, 3, 4]:
            return (operand, r) if operand.tensor_meta.dtype == node.tensor_meta.dtype else None
        if operand_shape != (b, h, 1, t, d) or dims != [0, 1, 2, 3, 4]:
            return None
        source = operand
    return None


def _grouped_operands(node: Node) -> tuple[Node, Node] | None:
    """The key and value with unrepeated heads for an attention node reading repeats."""
    if str(node.op) != _ATTENTION or len(node.args) < 3:
        return None
    key, value = repeated_heads(node.args[1]), repeated_heads(node.args[2])
    if key is None or value is None or key[1] != value[1] or key[1] == 1:
        return None
    return key[0], value[0]


class _Grouped(Transformer):
    def __init__(self, graph: Graph, grouped: dict[Node, tuple[Node, Node]]) -> None:
        super().__init__(graph)
        self.grouped = grouped

    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        operands = self.grouped.get(node)
        if operands is None:
            return super().transform_node(node, args, kwargs)
        key, value = (self.env[operand] for operand in operands)
        return super().transform_node(node, (args[0], key, value, *args[3:]), kwargs)


def grouped_query_attention(graph: Graph) -> Graph:
    """``graph`` with its CPU flash attentions reading unrepeated key/value heads (see the
    module docstring)."""
    grouped = {}
    for node in graph.nodes:
        operands = _grouped_operands(node)
        if operands is not None:
            grouped[node] = operands
    if not grouped:
        return graph
    return _Grouped(graph, grouped).run()
