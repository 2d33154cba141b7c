"""A graph with symbolic sizes moved into a fresh ``ShapeEnv`` (decision 0220).

A stage that traces a symbolic graph again (the autograd stage's joint trace) adds
guards, and possibly replacements (``s0 -> 16``), to the ``ShapeEnv`` it traces under.
Under the capture's own ``ShapeEnv`` a replacement would change the value of every
``SymInt`` the capture recorded, after the entry's size guard was built from them.
:func:`rebind_graph` gives the trace a ``ShapeEnv`` of its own, with the same symbol
names and hints, so the capture's graph and guard never change and the new trace's
guards are exactly those it added.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import torch

from torchstrata.core.graph import Graph, Node
from torchstrata.core.symbolic import (
    SYMBOLIC_TYPES,
    SymbolicSizes,
    evaluate,
    size_hint,
    symbolic_scope,
)
from torchstrata.core.symbolic_graphs import graph_symbols, input_symbol_slots
from torchstrata.core.transform import Transformer


def symbol_hints(graph: Graph) -> dict[str, int]:
    """Symbol name -> the size the capture saw, for every symbol that is the size of an
    input dimension of ``graph``."""
    return {
        name: size_hint(graph.inputs[position].meta.shape[dim])  # type: ignore[union-attr]
        for name, (position, dim) in input_symbol_slots(graph).items()
    }


class _Rebound(Transformer):
    def __init__(self, graph: Graph, sizes: SymbolicSizes, hints: Mapping[str, int]) -> None:
        super().__init__(graph)
        self.sizes = sizes
        self.hints = hints
        #: symbol name -> the new ShapeEnv's sympy symbol for it
        self.symbols = {
            name: sizes.declare(_source(graph, name), hint, name).node.expr
            for name, hint in hints.items()
        }
        #: sympy expression of the graph -> its SymInt in the new ShapeEnv (a graph
        #: repeats the same few sizes: each is made once)
        self._made: dict[Any, Any] = {}

    def value(self, value: Any) -> Any:
        if isinstance(value, SYMBOLIC_TYPES):
            if isinstance(value, torch.SymBool):
                raise NotImplementedError(f"cannot rebind a {type(value).__name__} ({value})")
            expr = value.node.expr
            if expr.is_Number:
                return int(expr) if isinstance(value, torch.SymInt) else float(expr)
            made = self._made.get(expr)
            if made is None:
                hint = evaluate(value, self.hints)
                new = expr.xreplace({s: self.symbols[s.name] for s in expr.free_symbols})
                shape_env = self.sizes.shape_env
                # a float of sizes (an attention's ``sqrt(ToFloat(s0))``) stays symbolic
                create = (
                    shape_env.create_symfloatnode
                    if isinstance(value, torch.SymFloat)
                    else shape_env.create_symintnode
                )
                made = self._made[expr] = create(new, hint=hint)
            return made
        if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
            return type(value)(self.value(item) for item in value)
        if isinstance(value, dict):
            return {key: self.value(item) for key, item in value.items()}
        if isinstance(value, slice):  # a subscript's bounds (``x[:, s0 : 2 * s0] = y``)
            return slice(self.value(value.start), self.value(value.stop), self.value(value.step))
        if hasattr(value, "shape") and hasattr(value, "strides"):
            return attrs.evolve(
                value,
                shape=self.value(tuple(value.shape)),
                strides=self.value(tuple(value.strides)),
            )
        return value

    def transform_input(self, node: Node) -> Node:
        return self.builder.input(node.name, self.value(node.meta))

    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        assert node.op is not None
        return self.builder.call(
            node.op,
            *self.value(args),
            meta=self.value(node.meta),
            name=node.name,
            **self.value(kwargs),
        )


def _source(graph: Graph, name: str) -> str:
    """Where the capture read symbol ``name`` (``L['x'].size()[0]``), else the name."""
    position, dim = input_symbol_slots(graph)[name]
    size: Any = graph.inputs[position].meta.shape[dim]  # type: ignore[union-attr]
    sources = size.node.shape_env.var_to_sources.get(size.node.expr) or ()
    text = sources[0].name if sources else name
    return str(text() if callable(text) else text)


def rebind_graph(
    graph: Graph, sizes: SymbolicSizes, hints: Mapping[str, int] | None = None
) -> Graph:
    """``graph`` with every symbolic size re-made in ``sizes``' ``ShapeEnv`` (the same
    symbol names: a symbol ``s77`` of the capture is ``s77`` there too), each symbol
    hinted at its value in ``hints`` (default: the size the capture saw).

    :raises ValueError: if a symbol of ``graph`` is not the size of an input dimension
        (its value could not be read from a call).
    """
    hints = {**symbol_hints(graph), **(hints or {})}
    unbound = graph_symbols(graph) - set(hints)
    if unbound:
        raise ValueError(f"symbols {sorted(unbound)} are not sizes of a graph input")
    rebound = _Rebound(graph, sizes, hints)
    # a node without metadata (``operator.setitem``: None) infers it again, on fake
    # tensors of the new ShapeEnv (plain meta tensors would specialise its symbols)
    with symbolic_scope(sizes):
        result = rebound.run()
    names = {str(expr) for expr in rebound.symbols.values()}
    if names != set(hints):
        raise ValueError(f"the new ShapeEnv named the symbols {sorted(names)}, not {sorted(hints)}")
    return result
