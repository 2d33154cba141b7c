"""Graphs that Dynamo hands over with symbolic sizes, run per size.

On a frame's second shape Dynamo's automatic dynamic shapes (or ``dynamic=True``) trace
the graph with symbolic sizes: its placeholders include size symbols (``s77``, a
``SymInt``), its tensors' ``example_value`` have symbolic shapes, and nodes compute
sizes (``x.size(0) * 2``). :class:`PerSizeGraph` reads each symbol's value from the
call's arguments (the ``s77`` argument, or the dimension of a tensor it is the size of)
and runs a lowering shared by many sizes where one serves those values
(:mod:`torchstrata.runtime.dynamo_shared`, decision 0455); else it makes the graph
static for them (:func:`concretised`) and lowers it for that size alone (decision 0207).
Nothing is guarded: Dynamo's guards stay symbolic, so one Dynamo compile serves every
size.

Where a symbol cannot be read from the arguments (a data-dependent size), the graph is
made static for this call through :func:`torchstrata.core.specialise_sizes` instead
(:func:`specialise`): ``int(s77)`` records ``s77 == 5`` in Dynamo's shape environment,
so Dynamo compiles again for another size.

The size symbols' placeholders are dropped from the static graphs (their uses become
constants); the compiled code is called without those arguments.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch
import torch.fx

from torchstrata.core import size_hint, specialise_sizes
from torchstrata.runtime.first_calls import FirstCall
from torchstrata.runtime.size_variants import count

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
    #: symbol name -> its value, for a graph made static by :func:`concretised`
    sizes: Mapping[str, int] | None = None


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
    """``gm`` made static for the sizes of this call under Dynamo's guards (``gm``
    itself is not changed): each symbol is evaluated with
    :func:`~torchstrata.core.specialise_sizes` (``int(s77)``), which records its value
    as a guard, so Dynamo recompiles for other sizes.

    :raises MarkedDynamic: a size the user marked dynamic would be specialised.
    :raises Exception: from ``int(s77)`` when a symbol has no value to specialise to
        (a data-dependent size); the caller runs the graph eagerly.
    """
    if not is_symbolic(gm, example_inputs):
        return StaticGraph(gm, tuple(example_inputs))
    _check_not_marked(example_inputs)
    return _folded(gm, example_inputs, specialise_sizes, guarded=True)


def _folded(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    evaluate: Callable[[Any], Any],
    *,
    guarded: bool,
) -> StaticGraph:
    """``gm`` with its symbol placeholders and computed sizes replaced by
    ``evaluate(value)``; with ``guarded``, every other symbolic value is evaluated too
    (for the guards that records)."""
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
            _replace_uses(node, evaluate(symbol))
            graph.erase_node(node)
            continue
        if guarded:
            evaluate(value)
        else:  # the example input gives the metadata (the fake value's is symbolic)
            node.meta.pop("val", None)
            node.meta.pop("example_value", None)
        kept.append(position)
    for node in list(graph.nodes):
        if node.op in ("call_function", "call_method"):
            value = _example_value(node)
            if _is_size_value(value):
                _replace_uses(node, evaluate(value))
                graph.erase_node(node)
            elif guarded:
                evaluate(value)
    graph.lint()
    static = torch.fx.GraphModule(gm, graph)
    return StaticGraph(static, tuple(example_inputs[i] for i in kept), tuple(kept))


def symbol_slots(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> dict[str, tuple[int, int | None]]:
    """Where each size symbol of ``gm`` is read in a call: symbol name -> (argument
    position, dimension), the dimension None for a symbol passed as a number (Dynamo's
    ``s77`` placeholder).

    :raises ValueError: a symbol that no argument gives (a data-dependent size).
    """
    slots: dict[str, tuple[int, int | None]] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    wanted: set[str] = set()
    for position, node in enumerate(placeholders):
        value = _example_value(node)
        if value is None and position < len(example_inputs):
            value = example_inputs[position]
        if isinstance(value, torch.SymInt):
            expr = value.node.expr
            wanted |= {s.name for s in expr.free_symbols}
            if expr.is_Symbol:
                slots.setdefault(expr.name, (position, None))
        elif isinstance(value, torch.Tensor):
            for dim, size in enumerate(value.shape):
                if isinstance(size, torch.SymInt):
                    expr = size.node.expr
                    wanted |= {s.name for s in expr.free_symbols}
                    if expr.is_Symbol:
                        slots.setdefault(expr.name, (position, dim))
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method"):
            wanted |= _free_symbols(_example_value(node))
    unbound = wanted - set(slots)
    if unbound:
        raise ValueError(f"sizes {sorted(unbound)} are not read from any input")
    return slots


def _free_symbols(value: Any) -> set[str]:
    if isinstance(value, _SYMBOLIC):
        return {s.name for s in value.node.expr.free_symbols}
    if isinstance(value, torch.Tensor):
        sizes = (*value.shape, *value.stride(), value.storage_offset())
        return set().union(*(_free_symbols(size) for size in sizes))
    if isinstance(value, list | tuple):
        return set().union(*(_free_symbols(item) for item in value))
    return set()


def concretised(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], values: Mapping[str, int]
) -> StaticGraph:
    """``gm`` made static for the sizes ``values`` (symbol name -> size), without
    guarding anything: Dynamo's guards keep admitting every size, and the caller
    lowers one static graph per size (:class:`PerSizeGraph`). ``gm`` is not changed."""
    import sympy  # type: ignore[import-untyped]

    def evaluate(value: Any) -> Any:
        if isinstance(value, list | tuple):
            return type(value)(evaluate(item) for item in value)
        if not isinstance(value, _SYMBOLIC):
            return value
        expr = value.node.expr
        free = {s: sympy.Integer(values[s.name]) for s in expr.free_symbols}
        result = expr.xreplace(free)
        if isinstance(value, torch.SymInt):
            return int(result)
        if isinstance(value, torch.SymFloat):
            return float(result)
        return bool(result)

    static = _folded(gm, example_inputs, evaluate, guarded=False)
    return attrs.evolve(static, sizes=dict(values))


class PerSizeGraph:
    """Runs a Dynamo graph traced with symbolic sizes: each call's sizes are served by a
    lowering shared by many sizes where ``shared`` gives one (decision 0455), else made
    static (:func:`concretised`) and lowered for those sizes, once per distinct size;
    Dynamo's guards stay symbolic, so Dynamo does not recompile for a new size (decision
    0207).

    :param gm: Dynamo's graph.
    :param slots: where each symbol is read (:func:`symbol_slots`).
    :param lower: lowers a :class:`StaticGraph` into a callable of the kept arguments.
    :param max_lowered: sizes lowered on their own at most; later such sizes run ``gm``
        as it is.
    :param shared: ``shared(values, args)``: a runner for the sizes ``values`` (symbol
        name -> int) of a call with ``args`` from a lowering that serves many sizes,
        with what records the failure of its first call (the size is then lowered on
        its own, :class:`~torchstrata.runtime.first_calls.FirstCall`); None where none
        serves them.
    """

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        slots: Mapping[str, tuple[int, int | None]],
        lower: Callable[[StaticGraph], Callable[..., Any]],
        max_lowered: int = 64,
        shared: Callable[
            [Mapping[str, int], Sequence[Any]],
            tuple[Callable[..., Any], Callable[[Exception], None]] | None,
        ]
        | None = None,
    ) -> None:
        self.gm = gm
        self.names = tuple(slots)
        self._slots = tuple(slots.values())
        self.lower = lower
        self.max_lowered = max_lowered
        self.shared = shared
        #: sizes (in the order of ``names``) -> the runner for them
        self.runners: dict[tuple[int, ...], Callable[..., Any]] = {}
        #: how many sizes were made static and lowered on their own
        self.lowered = 0

    def key(self, args: Sequence[Any]) -> tuple[int, ...]:
        """The sizes of the symbols in a call with ``args``."""
        return tuple(
            [size_hint(args[p]) if d is None else args[p].shape[d] for p, d in self._slots]
        )

    def runner_for(self, args: Sequence[Any]) -> Callable[..., Any]:
        """The runner for the sizes of ``args`` (lowered now if they are new); raises
        what lowering raises."""
        key = self.key(args)
        runner = self.runners.get(key)
        if runner is None:
            values = dict(zip(self.names, key, strict=True))
            found = None if self.shared is None else self.shared(values, args)
            if found is not None:
                shared, failed = found
                per_size = functools.partial(self._lower_static, args, values)
                runner = FirstCall(shared, key, self.runners, per_size, failed)
                self.runners[key] = runner
                return runner
            if self.lowered >= self.max_lowered:
                return self.gm.forward
            runner = self.runners[key] = self._lower_static(args, values)
        return runner

    def _lower_static(self, args: Sequence[Any], values: Mapping[str, int]) -> Callable[..., Any]:
        self.lowered += 1
        count("per_size")
        return self.lower(concretised(self.gm, args, values))

    def __call__(self, *args: Any) -> Any:
        return self.runner_for(args)(*args)
