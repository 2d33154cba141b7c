"""Graphs with symbolic sizes: finding their symbols, and instantiating them for the
sizes of one call (see :mod:`torchstrata.core.symbolic`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchstrata.core.graph import Graph, Node
from torchstrata.core.symbolic import SYMBOLIC_TYPES, Concretizer, has_symbols
from torchstrata.core.transform import Transformer


def graph_has_symbols(graph: Graph) -> bool:
    """Whether any metadata or argument of ``graph`` holds a symbolic size."""
    for node in graph.all_nodes():
        metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
        for meta in metas:
            if meta is not None and has_symbols(tuple(getattr(meta, "shape", ()))):
                return True
        if has_symbols(node.args) or has_symbols(dict(node.kwargs)):
            return True
    return False


def input_symbol_slots(graph: Graph) -> dict[str, tuple[int, int]]:
    """Symbol name -> (input position, dimension) of the first input dimension whose
    size is exactly that symbol: where a call's value of the symbol is read."""
    slots: dict[str, tuple[int, int]] = {}
    for position, node in enumerate(graph.inputs):
        for dim, size in enumerate(getattr(node.meta, "shape", ())):
            if isinstance(size, SYMBOLIC_TYPES) and size.node.expr.is_Symbol:
                slots.setdefault(size.node.expr.name, (position, dim))
    return slots


def graph_symbols(graph: Graph) -> set[str]:
    """The names of every symbol ``graph`` mentions."""
    names: set[str] = set()

    def visit(value: Any) -> None:
        if isinstance(value, SYMBOLIC_TYPES):
            names.update(symbol.name for symbol in value.node.expr.free_symbols)
        elif isinstance(value, list | tuple):
            for item in value:
                visit(item)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif hasattr(value, "shape") and hasattr(value, "strides"):
            visit(tuple(value.shape))
            visit(tuple(value.strides))

    for node in graph.all_nodes():
        visit(node.meta)
        visit(node.args)
        visit(dict(node.kwargs))
    return names


class _Concretized(Transformer):
    def __init__(self, graph: Graph, values: Mapping[str, int]) -> None:
        super().__init__(graph)
        self.concrete = Concretizer(values)

    def transform_input(self, node: Node) -> Node:
        return self.builder.input(node.name, self.concrete(node.meta))

    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        assert node.op is not None
        concrete = self.concrete
        return self.builder.call(
            node.op, *concrete(args), meta=concrete(node.meta), name=node.name, **concrete(kwargs)
        )


def concretize_graph(graph: Graph, values: Mapping[str, int]) -> Graph:
    """``graph`` with every symbolic size replaced by its value under ``values`` (symbol
    name -> int): the graph a static capture at those sizes records."""
    return _Concretized(graph, values).run()
