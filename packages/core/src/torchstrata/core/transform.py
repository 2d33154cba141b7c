"""Rebuilding a graph node by node: the base of every pass that rewrites."""

from __future__ import annotations

from typing import Any

from torchstrata.core.builder import GraphBuilder
from torchstrata.core.graph import Graph, Node, map_nodes
from torchstrata.core.ops import Level


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
        return self.builder.call(node.op, *args, meta=keep_meta, name=node.name, **kwargs)

    def run(self) -> Graph:
        """Transform every node and return the new graph."""
        for node in self.graph.inputs:
            self.env[node] = self.transform_input(node)
        for node in self.graph.nodes:
            args = map_nodes(node.args, self.env.__getitem__)
            kwargs = map_nodes(dict(node.kwargs), self.env.__getitem__)
            self.env[node] = self.transform_node(node, args, kwargs)
        return self.builder.build([self.env[output] for output in self.graph.outputs])


def eliminate_dead_code(graph: Graph) -> Graph:
    """Drop nodes whose values reach no output (every op in the IR is pure)."""
    live: set[Node] = set(graph.outputs)
    for node in reversed(graph.nodes):
        if node in live:
            live.update(node.input_nodes())
    kept = tuple(node for node in graph.nodes if node in live)
    return Graph(graph.level, graph.inputs, kept, graph.outputs)
