"""One autograd trace for every size of a Dynamo graph with symbolic sizes (decision 0256).

:class:`~torchstrata.runtime.dynamo_sizes.PerSizeGraph` lowers a Dynamo graph once per
size from a static copy of it (decision 0207). The autograd stage's symbolic trace
(decision 0220, ``Pipeline.trace_symbolic``) needs a torch-level graph whose symbols
are sizes of its input dimensions (``core.rebind_graph`` reads them there): Dynamo's
graph passes sizes as ``SymInt`` placeholders (``s77``) and computes others in nodes.
:func:`symbolic_import` imports it with those placeholders and size nodes folded into
symbolic constants, every symbol re-made in a :class:`~torchstrata.core.SymbolicSizes`
of its own as the size of the input dimension Dynamo's own fake values give it
(:func:`~torchstrata.runtime.dynamo_sizes.symbol_slots`); the graph's inputs are then
those of each size's static graph, in order and by name, so a size's ``AotResult`` from
the trace stands for that static graph.

Dynamo's ``ShapeEnv`` is only read (symbols and hints): the import and the trace guard
in the new one, never in Dynamo's, whose guards are final once the backend returns. A
size outside the trace's conditions is traced on its own (its ``AotResult`` None), as
the runtime's symbolic entries do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx

from torchstrata.core import (
    AotResult,
    Graph,
    SymbolicAot,
    SymbolicSizes,
    from_fx,
    size_hint,
    symbolic_scope,
)
from torchstrata.core.options import SHARED_DECOMPOSITION_FROM
from torchstrata.core.size_values import conditions_check, violated
from torchstrata.core.symbolic import evaluate
from torchstrata.runtime.artifacts import SizedAot
from torchstrata.runtime.dynamo_sizes import _example_value, _folded
from torchstrata.runtime.symbolic_traces import SymbolicTraces

logger = logging.getLogger("torchstrata.runtime")

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


class _Rebinder:
    """Dynamo's symbolic sizes as sizes of ``sizes``' ``ShapeEnv``."""

    def __init__(
        self, sizes: SymbolicSizes, symbols: Mapping[str, Any], hints: Mapping[str, int]
    ) -> None:
        self.sizes = sizes
        self.symbols = symbols  # Dynamo symbol name -> the new SymInt
        self.hints = hints

    def __call__(self, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return type(value)(self(item) for item in value)
        if not isinstance(value, _SYMBOLIC):
            return value
        if isinstance(value, torch.SymBool):
            raise NotImplementedError(f"a symbolic {type(value).__name__} ({value})")
        import sympy  # type: ignore[import-untyped]

        expr = value.node.expr
        if expr.is_Number:
            return int(expr) if isinstance(value, torch.SymInt) else float(expr)
        free = {s: self.symbols[s.name].node.expr for s in expr.free_symbols}
        at_hints = expr.xreplace({s: sympy.Integer(self.hints[s.name]) for s in expr.free_symbols})
        rebound = expr.xreplace(free)
        if isinstance(value, torch.SymFloat):
            # a float computed from sizes (an attention's ``sqrt(ToFloat(s69))``): a
            # symbolic float of the new ShapeEnv, lowered as an expression of the sizes
            shape_env = self.sizes.shape_env
            return shape_env.create_symfloatnode(rebound, hint=float(at_hints))
        return self.sizes.shape_env.create_symintnode(rebound, hint=int(at_hints))

    def tensor(self, value: torch.Tensor) -> torch.Tensor:
        """A fake tensor of the new ``ShapeEnv`` with ``value``'s symbolic layout."""
        with self.sizes.fake_mode:
            fake = torch.empty_strided(
                self(tuple(value.shape)),
                self(tuple(value.stride())),
                dtype=value.dtype,
                device=value.device,
            )
        return fake.requires_grad_(value.requires_grad)


def symbolic_import(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    slots: Mapping[str, tuple[int, int | None]],
    conditions: list[Any] | None = None,
    names: dict[str, str] | None = None,
) -> Graph:
    """Dynamo's ``gm`` as a torch-level :class:`Graph` whose symbols are sizes of its
    input dimensions (see the module docstring). The conditions on sizes the import
    relied on (a meta function that branched on a size: ``narrow``'s bounds, ``0 <= s77 -
    s77//2``; sympy booleans) are appended to ``conditions``: the graph stands for the
    sizes that meet them (decision 0455).

    The graph's symbols are named by the input dimension each is the size of, not as
    Dynamo named them: Dynamo's names depend on what its shape environment held (a
    recompile's length may be ``s0`` where a fresh process's is ``s69``), and the same
    graph must have the same text in every process, the key of its compiled-graph cache
    entry (decision 0497). ``names`` is given Dynamo's name -> the graph's.

    :raises ValueError: a symbol that is no tensor argument's dimension (passed only as
        a number: its value is read from the ``s77`` argument, not a tensor), or, without
        ``conditions``, an import that relied on a condition on sizes.
    """
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    slots = {**slots, **tensor_dims(placeholders, slots)}
    numbers = sorted(name for name, (_, dim) in slots.items() if dim is None)
    if numbers:
        raise ValueError(f"sizes {numbers} are no tensor argument's dimension")
    sizes = SymbolicSizes({})
    hints = {
        name: size_hint(example_inputs[position].shape[dim])
        for name, (position, dim) in slots.items()
        if dim is not None
    }
    symbols = {}
    # in the order of the inputs' dimensions: the ShapeEnv names a symbol by its source
    # (``l_x_.size()[0]``), the next free number where two sources' numbers meet
    for name in sorted(slots, key=lambda name: slots[name]):
        position, dim = slots[name]
        where = f"{placeholders[position].name}.size()[{dim}]"
        symbols[name] = sizes.declare(where, hints[name])
    if names is not None:
        names.update({name: str(symbol.node.expr) for name, symbol in symbols.items()})
    rebind = _Rebinder(sizes, symbols, hints)
    examples: list[Any] = []
    for node, example in zip(placeholders, example_inputs, strict=True):
        value = _example_value(node)
        if isinstance(value, _SYMBOLIC):
            examples.append(value)  # folded by _folded
        elif isinstance(value, torch.Tensor):
            examples.append(rebind.tensor(value))
        else:
            examples.append(example)
    folded = _folded(gm, examples, rebind, guarded=False)
    with symbolic_scope(sizes):
        graph = from_fx(folded.gm, list(folded.examples))
    relied = [guard.expr for guard in sizes.shape_env.guards]
    if relied and conditions is None:  # metadata the import inferred holds only there
        text = ", ".join(map(str, relied))
        raise ValueError(f"importing the graph relied on size conditions: {text}")
    if conditions is not None:
        conditions.extend(relied)
    return graph


def tensor_dims(
    placeholders: Sequence[torch.fx.Node], symbols: Mapping[str, Any]
) -> dict[str, tuple[int, int]]:
    """For each of ``symbols``, the first tensor placeholder's dimension whose size is
    exactly that symbol (Dynamo passes ``s77`` as an argument of its own too, before
    the tensor it is the size of)."""
    found: dict[str, tuple[int, int]] = {}
    for position, node in enumerate(placeholders):
        value = _example_value(node)
        if not isinstance(value, torch.Tensor):
            continue
        for dim, size in enumerate(value.shape):
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                name = size.node.expr.name
                if name in symbols:
                    found.setdefault(name, (position, dim))
    return found


def same_inputs(symbolic: Graph, static: Graph, values: Mapping[str, int]) -> bool:
    """Whether ``static``'s inputs are ``symbolic``'s at the sizes ``values``: the same
    names, dtypes, devices and gradient flags, and the sizes and strides the symbolic
    ones evaluate to (a trace's result at ``values`` then stands for ``static``)."""
    if len(symbolic.inputs) != len(static.inputs):
        return False
    for ours, theirs in zip(symbolic.inputs, static.inputs, strict=True):
        a, b = ours.tensor_meta, theirs.tensor_meta
        if (ours.name, a.dtype, a.device, a.requires_grad) != (
            theirs.name,
            b.dtype,
            b.device,
            b.requires_grad,
        ):
            return False
        shape = tuple(evaluate(size, values) for size in a.shape)
        strides = tuple(evaluate(stride, values) for stride in a.strides)
        if shape != tuple(b.shape) or strides != tuple(b.strides):
            return False
    return True


class DynamoTraces(SymbolicTraces):
    """The symbolic autograd traces of one Dynamo graph (:class:`SymbolicTraces`), each
    size served only where its static graph's inputs are the symbolic graph's.

    :param graph: the graph :func:`symbolic_import` made.
    :param trace: the pipeline's ``trace_symbolic`` of ``graph``, taking the sizes its
        decisions are taken for (None: the import's hints).
    :param max_traces: traces made at most (a size outside all of them is traced on its own).
    :param shared_from: the size of a trace from which on its sizes share its one
        decomposition (the compile option ``shared_decomposition_from``).
    :param conditions: the conditions on sizes the import of ``graph`` relied on; sizes
        that break one are traced on their own.
    :param names: Dynamo's name of each symbol -> ``graph``'s (:func:`symbolic_import`):
        the sizes a caller gives (:meth:`ours`) are named as Dynamo names them.
    """

    def __init__(
        self,
        graph: Graph,
        trace: Callable[[Mapping[str, int] | None], SymbolicAot | None],
        max_traces: int = 4,
        shared_from: int = SHARED_DECOMPOSITION_FROM,
        conditions: Sequence[Any] = (),
        names: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(trace, max_traces, shared_from)
        self.graph = graph
        self.names = dict(names or {})
        self.conditions = tuple(conditions)
        self._imported = conditions_check(self.conditions)
        self._first = True

    def first(self) -> DynamoTraces | None:
        """These traces, the first made here at the first use (decision 0497: a
        lowering read from the compiled-graph cache traces nothing); None where the
        autograd stage made no symbolic trace (each size is traced on its own)."""
        if self._first:
            self._first = False
            self.add(None)
        return self if self.traces else None

    def ours(self, values: Mapping[str, int]) -> dict[str, int]:
        """Sizes named as Dynamo names its symbols, named as the graph's."""
        return {self.names.get(name, name): value for name, value in values.items()}

    def outside_import(self, values: Mapping[str, int]) -> str:
        """The first condition the import relied on that the sizes ``values`` break, as
        text; '' where they meet every one (the graph stands for them)."""
        if self._imported(values):
            return ""
        return str(violated(self.conditions, values))

    def at_static(self, values: Mapping[str, int], static: Graph) -> AotResult | SizedAot | None:
        """The ``AotResult`` of ``static`` (the graph made static at ``values``, named as
        Dynamo names its symbols) from a trace (:meth:`SymbolicTraces.at`); None: the size
        is traced on its own (also where ``static``'s inputs are not the symbolic graph's
        at ``values``)."""
        values = self.ours(values)
        if not same_inputs(self.graph, static, values):
            logger.debug("dynamo backend: sizes %s have other inputs: traced on their own", values)
            return None
        outside = self.outside_import(values)
        if outside:
            logger.debug("dynamo backend: sizes %s break %s: traced on their own", values, outside)
            return None
        return None if self.first() is None else self.at(values)
