"""Graphs with symbolic sizes: finding their symbols, and instantiating them for the
sizes of one call (see :mod:`torchstrata.core.symbolic`)."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import attrs

from torchstrata.core.builder import NAME_PATTERN
from torchstrata.core.concretizer import Concretizer
from torchstrata.core.graph import Graph, Node, map_nodes
from torchstrata.core.symbolic import SYMBOLIC_TYPES, has_symbols
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
        elif isinstance(value, slice):
            visit((value.start, value.stop, value.step))
        elif hasattr(value, "shape") and hasattr(value, "strides"):
            visit(tuple(value.shape))
            visit(tuple(value.strides))

    for node in graph.all_nodes():
        visit(node.meta)
        visit(node.args)
        visit(dict(node.kwargs))
    return names


class _Concretized(Transformer):
    def __init__(
        self, graph: Graph, values: Mapping[str, int], concrete: Concretizer | None = None
    ) -> None:
        super().__init__(graph)
        self.concrete = concrete if concrete is not None else Concretizer(values)

    def transform_input(self, node: Node) -> Node:
        return self.builder.input(node.name, self.concrete(node.meta))

    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        assert node.op is not None
        concrete = self.concrete
        return self.builder.call(
            node.op, *concrete(args), meta=concrete(node.meta), name=node.name, **concrete(kwargs)
        )


@attrs.frozen
class _Shape:
    """What :func:`concretize_graph` needs to know of a graph apart from a call's sizes:
    whether a builder would keep every name as it is (unique, well formed), and which
    calls have symbolic arguments (the others keep theirs, their nodes mapped)."""

    names_kept: bool
    symbolic_args: frozenset[Node]


#: The :class:`_Shape` of the symbolic graphs made static so far (a symbolic entry makes
#: the same few graphs static at every size; graphs are immutable).
_SHAPES: weakref.WeakKeyDictionary[Graph, _Shape] = weakref.WeakKeyDictionary()


def _shape(graph: Graph) -> _Shape:
    found = _SHAPES.get(graph)
    if found is None:
        names = [node.name for node in graph.all_nodes()]
        kept = len(set(names)) == len(names) and all(map(NAME_PATTERN.fullmatch, names))
        symbolic = frozenset(
            node
            for node in graph.nodes
            if _concretized(node.args) or _concretized(dict(node.kwargs))
        )
        found = _SHAPES[graph] = _Shape(
            kept and all(n.meta is not None for n in graph.nodes), symbolic
        )
    return found


def _concretized(value: Any) -> bool:
    """Whether :class:`Concretizer` would change ``value`` (a symbolic scalar, constant
    or not, or metadata somewhere in it), rather than give an equal copy."""
    if isinstance(value, SYMBOLIC_TYPES):
        return True
    if isinstance(value, list | tuple):
        return any(_concretized(item) for item in value)
    if isinstance(value, dict):
        return any(_concretized(item) for item in value.values())
    if isinstance(value, slice):
        return _concretized((value.start, value.stop, value.step))
    return attrs.has(type(value)) and getattr(value, "shape", None) is not None


def concretize_graph(
    graph: Graph, values: Mapping[str, int], concrete: Concretizer | None = None
) -> Graph:
    """``graph`` with every symbolic size replaced by its value under ``values`` (symbol
    name -> int): the graph a static capture at those sizes records.

    The nodes are those a :class:`~torchstrata.core.GraphBuilder` copy would make (the
    same names, no tags, each metadata made static), built directly: each size
    expression is evaluated once, and calls without a symbolic argument keep theirs
    (decision 0320). ``concrete`` replaces each symbolic scalar otherwise (default: a
    :class:`Concretizer` of ``values``)."""
    shape = _shape(graph)
    concrete = concrete if concrete is not None else Concretizer(values)
    if not shape.names_kept:
        return _Concretized(graph, values, concrete).run()
    env: dict[Node, Node] = {}
    inputs = []
    for node in graph.inputs:
        made = env[node] = Node(node.name, None, meta=concrete(node.meta))
        inputs.append(made)
    nodes = []
    lookup = env.__getitem__
    for node in graph.nodes:
        args = map_nodes(node.args, lookup)
        kwargs = map_nodes(dict(node.kwargs), lookup)
        if node in shape.symbolic_args:
            args, kwargs = concrete(args), concrete(kwargs)
        made = env[node] = Node(node.name, node.op, tuple(args), dict(kwargs), concrete(node.meta))
        nodes.append(made)
    return Graph(graph.level, tuple(inputs), tuple(nodes), tuple(env[o] for o in graph.outputs))
