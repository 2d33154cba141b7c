"""Rebuilding a graph node by node: the base of every pass that rewrites."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import attrs

from torchstrata.core.builder import GraphBuilder
from torchstrata.core.graph import Graph, Node, map_nodes
from torchstrata.core.meta import TensorMeta
from torchstrata.core.ops import Level, OpKind


class Transformer:
    """Copies a graph into a new builder, one node at a time.

    Override :meth:`transform_node` to replace a node by any subgraph built on
    ``self.builder``; return the node that stands for the old node's value. The
    default copies the node (re-inferring metadata when the level changes).

    >>> class ExpToExp2(Transformer):
    ...     def transform_node(self, node, args, kwargs):
    ...         if node.op == prim("exp"):
    ...             return self.builder.call(prim("exp2"), self.builder.call(prim("mul"), args[0], 1.4427))
    ...         return super().transform_node(node, args, kwargs)
    """

    def __init__(self, graph: Graph, level: Level | None = None) -> None:
        self.graph = graph
        self.level = level or graph.level
        self.builder = GraphBuilder(self.level)
        self.env: dict[Node, Node] = {}

    def transform_input(self, node: Node) -> Node:
        """Copy one graph input."""
        return self.builder.input(node.name, node.tensor_meta)

    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        """Produce the new node for ``node``, whose inputs are already mapped in ``args``."""
        assert node.op is not None
        keep_meta = node.meta if self.level is self.graph.level else None
        builder = self.builder
        if node.tags <= builder._tags:  # most nodes: no tags of their own to add
            return builder.call(node.op, *args, meta=keep_meta, name=node.name, **kwargs)
        with builder.tagged(node.tags):
            return builder.call(node.op, *args, meta=keep_meta, name=node.name, **kwargs)

    def run(self) -> Graph:
        """Transform every node and return the new graph."""
        for node in self.graph.inputs:
            self.env[node] = self.transform_input(node)
        for node in self.graph.nodes:
            args = map_nodes(node.args, self.env.__getitem__)
            kwargs = map_nodes(dict(node.kwargs), self.env.__getitem__)
            self.env[node] = self.transform_node(node, args, kwargs)
        return self.builder.build([self.env[output] for output in self.graph.outputs])


class _Retyped(Transformer):
    """Copies a graph with some inputs' metadata replaced, inferring again the metadata
    of every node that depends on them."""

    def __init__(self, graph: Graph, metas: Mapping[int, TensorMeta]) -> None:
        super().__init__(graph)
        self.metas = {graph.inputs[position]: meta for position, meta in metas.items()}
        self.changed: set[Node] = set()

    def transform_input(self, node: Node) -> Node:
        meta = self.metas.get(node)
        if meta is None or meta == node.meta:
            return super().transform_input(node)
        self.changed.add(node)
        return self.builder.input(node.name, meta)

    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        assert node.op is not None
        if not any(source in self.changed for source in node.input_nodes()):
            return super().transform_node(node, args, kwargs)
        self.changed.add(node)
        with self.builder.tagged(node.tags):
            return self.builder.call(node.op, *args, name=node.name, **kwargs)


def with_input_metas(graph: Graph, metas: Mapping[int, TensorMeta]) -> Graph:
    """``graph`` with its inputs at the positions in ``metas`` given that metadata (e.g.
    other strides), and the metadata of every node that depends on them inferred again;
    ``graph`` itself when no meta differs."""
    if all(graph.inputs[position].meta == meta for position, meta in metas.items()):
        return graph
    return _Retyped(graph, metas).run()


def eliminate_dead_code(graph: Graph) -> Graph:
    """Drop nodes whose values reach no output (every op in the IR is pure)."""
    live: set[Node] = set(graph.outputs)
    for node in reversed(graph.nodes):
        if node in live:
            live.update(node.input_nodes())
    kept = tuple(node for node in graph.nodes if node in live)
    return Graph(graph.level, graph.inputs, kept, graph.outputs)


def exact_key(value: bool | int | float | complex) -> tuple[type, str]:
    """The equality key of a scalar constant, equal only for exactly the same value:
    ``==`` makes ``0.0`` and ``-0.0`` one (merging ``x * 0.0`` with ``x * -0.0`` flips the
    sign of ``1 / (x * -0.0)``), and ``1``, ``1.0`` and ``True`` too, while a NaN is not
    even equal to itself. Used wherever equal values are merged: the prims graph's CSE and
    the inductor's kernel expressions."""
    return type(value), repr(value)


def _value_key(value: Any) -> Any:
    """A hashable key of an op's argument that tells apart what ``==`` conflates (see
    :func:`exact_key`)."""
    if isinstance(value, Node):
        return ("node", id(value))
    if isinstance(value, list | tuple):
        return ("sequence", tuple(_value_key(item) for item in value))
    if isinstance(value, dict):
        return ("dict", tuple((key, _value_key(item)) for key, item in value.items()))
    if isinstance(value, bool | int | float | complex):
        return exact_key(value)
    return (type(value).__name__, value)


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """Merge prims nodes that apply the same op to the same operands (every prim is pure,
    ``prims.rand`` included: its stream is a function of its arguments).

    Other nodes are kept as they are: an ATen op left in a prims graph may draw random
    numbers (two ``aten.rand_like`` calls are two draws). Two graph outputs are never
    merged into one node: the caller would receive one tensor twice where it expects two.

    The merge is idempotent: a graph it returned has nothing left to merge, and is
    returned as it is when it comes back (the inductor merges before its passes and
    again after ``factor_sums``, which mostly changes nothing)."""
    if graph in _MERGED:
        return graph
    outputs = set(graph.outputs)
    seen: dict[Any, tuple[Node, bool]] = {}
    env: dict[Node, Node] = {}
    nodes: list[Node] = []
    for original in graph.nodes:
        node = original
        kwargs = dict(node.kwargs)
        if env and any(arg in env for arg in node.input_nodes()):
            args = map_nodes(node.args, lambda n: env.get(n, n))
            kwargs = map_nodes(kwargs, lambda n: env.get(n, n))
            node = env[original] = attrs.evolve(node, args=args, kwargs=kwargs)
        else:  # nothing merged among its operands: the node as it is
            args = node.args
        is_output = original in outputs
        if node.op is None or node.op.kind is not OpKind.PRIMS:
            nodes.append(node)
            continue
        try:
            key = (node.op, _value_key(args), _value_key(kwargs), node.meta)
            hash(key)
        except TypeError:  # an unhashable constant: keep the node
            nodes.append(node)
            continue
        earlier = seen.get(key)
        if earlier is not None and not (is_output and earlier[1]):
            env[original] = earlier[0]
            continue
        seen.setdefault(key, (node, is_output))
        nodes.append(node)
    if env:
        graph = Graph(
            graph.level, graph.inputs, tuple(nodes), tuple(env.get(o, o) for o in graph.outputs)
        )
    _MERGED.add(graph)
    return graph


#: The graphs :func:`eliminate_common_subexpressions` returned (graphs are immutable).
_MERGED: weakref.WeakSet[Graph] = weakref.WeakSet()
