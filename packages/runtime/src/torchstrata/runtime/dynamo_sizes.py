"""Graphs that Dynamo hands over with symbolic sizes, made static for this call.

On a frame's second shape Dynamo's automatic dynamic shapes (or ``dynamic=True``) trace
the graph with symbolic sizes: its placeholders include size symbols (``s77``, a
``SymInt``), its tensors' ``example_value`` have symbolic shapes, and nodes compute
sizes (``x.size(0) * 2``). torchstrata compiles static shapes only, so each symbol is
evaluated through :func:`torch.fx.experimental.symbolic_shapes.guard_int`: that gives
its value in this call AND records ``s77 == 5`` in Dynamo's shape environment, so the
guards Dynamo builds after the backend returns admit only calls of these very sizes.
Another size fails them and Dynamo compiles again (up to its own recompile limit).

The size symbols' placeholders are dropped from the graph (their uses become the
constants); the compiled code is called without those arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import guard_bool, guard_float, guard_int

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


@attrs.frozen
class StaticGraph:
    """``gm`` with every size symbol replaced by its value in this call.

    ``examples`` are the example inputs for the placeholders that remain; ``kept`` the
    positions (in Dynamo's argument list) of those placeholders (None: all kept, nothing
    was symbolic).
    """

    gm: torch.fx.GraphModule
    examples: tuple[Any, ...]
    kept: tuple[int, ...] | None = None


def _example_value(node: torch.fx.Node) -> Any:
    return node.meta.get("example_value", node.meta.get("val"))


def _has_symbols(value: Any) -> bool:
    if isinstance(value, _SYMBOLIC):
        return True
    if isinstance(value, torch.Tensor):
        sizes = (*value.shape, *value.stride(), value.storage_offset())
        return any(isinstance(size, torch.SymInt) for size in sizes)
    if isinstance(value, list | tuple):
        return any(_has_symbols(item) for item in value)
    return False


def is_symbolic(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> bool:
    """Whether Dynamo traced ``gm`` with symbolic sizes."""
    if any(isinstance(example, _SYMBOLIC) for example in example_inputs):
        return True
    return any(_has_symbols(_example_value(node)) for node in gm.graph.nodes)


def _concrete(value: Any) -> Any:
    """``value`` with every symbol evaluated (and guarded) to this call's value."""
    if isinstance(value, torch.SymInt):
        return guard_int(value)
    if isinstance(value, torch.SymFloat):
        return guard_float(value)
    if isinstance(value, torch.SymBool):
        return guard_bool(value)
    if isinstance(value, torch.Tensor):
        for size in (*value.shape, *value.stride(), value.storage_offset()):
            _concrete(size)
        return value
    if isinstance(value, list | tuple):
        return type(value)(_concrete(item) for item in value)
    return value


def _is_size_value(value: Any) -> bool:
    """A symbol, or a sequence of numbers holding one (``x.size()``): computed sizes,
    which become constants (a tuple of tensors, as ``split`` returns, stays a node)."""
    if isinstance(value, _SYMBOLIC):
        return True
    if isinstance(value, list | tuple) and value:
        numbers = all(isinstance(item, (*_SYMBOLIC, int, float, bool)) for item in value)
        return numbers and _has_symbols(value)
    return False


def _replace_uses(node: torch.fx.Node, constant: Any) -> None:
    for user in list(node.users):
        user.args = torch.fx.node.map_arg(user.args, lambda n: constant if n is node else n)
        user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda n: constant if n is node else n)


class MarkedDynamic(ValueError):
    """The user marked a size dynamic (Dynamo's ``mark_dynamic``): Dynamo would
    reject a specialisation of it when it builds the guards."""


def _check_not_marked(example_inputs: Sequence[Any]) -> None:
    for position, example in enumerate(example_inputs):
        # ``mark_dynamic`` records the dims on the tensor itself (maybe_mark_dynamic,
        # a hint that allows specialisation, uses another attribute).
        marked = getattr(example, "_dynamo_dynamic_indices", None)
        if isinstance(example, torch.Tensor) and marked:
            raise MarkedDynamic(
                f"input {position} has dims {sorted(marked)} marked dynamic (mark_dynamic)"
            )


def specialise(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> StaticGraph:
    """``gm`` made static for the sizes of this call (``gm`` itself is not changed).

    :raises MarkedDynamic: a size the user marked dynamic would be specialised.
    :raises Exception: from ``guard_int`` when a symbol has no value to specialise to
        (a data-dependent size); the caller runs the graph eagerly.
    """
    if not is_symbolic(gm, example_inputs):
        return StaticGraph(gm, tuple(example_inputs))
    _check_not_marked(example_inputs)
    graph = torch.fx.Graph()
    output = graph.graph_copy(gm.graph, {})
    graph.output(output)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise ValueError(
            f"{len(placeholders)} placeholders but {len(example_inputs)} example inputs"
        )
    kept: list[int] = []
    for position, (node, example) in enumerate(zip(placeholders, example_inputs, strict=True)):
        value = _example_value(node)
        symbol = value if isinstance(value, _SYMBOLIC) else example
        if isinstance(symbol, _SYMBOLIC):
            # Only a symbol is folded: its guard keeps the constant right. A plain
            # number stays an input (and the import refuses it: the graph runs eagerly).
            _replace_uses(node, _concrete(symbol))
            graph.erase_node(node)
        else:
            _concrete(value)
            kept.append(position)
    for node in list(graph.nodes):
        if node.op in ("call_function", "call_method"):
            value = _example_value(node)
            if _is_size_value(value):
                _replace_uses(node, _concrete(value))
                graph.erase_node(node)
            else:
                _concrete(value)
    graph.lint()
    static = torch.fx.GraphModule(gm, graph)
    return StaticGraph(static, tuple(example_inputs[i] for i in kept), tuple(kept))
