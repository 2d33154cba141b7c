"""A Dynamo graph with symbolic sizes lowered once for many sizes (issue 33, decision 0455).

:class:`~torchstrata.runtime.dynamo_sizes.PerSizeGraph` makes Dynamo's graph static for
each call's sizes and lowers it once per distinct size (decision 0207). The runtime's own
symbolic entries lower their graph once, with its sizes symbolic, for every size that
meets the conditions the lowering relied on (decisions 0381, 0395, 0400). A
:class:`SharedLowerings` gives the Dynamo graph that lowering: the graph
:func:`~torchstrata.runtime.dynamo_symbolic.symbolic_import` made (the one the symbolic
autograd trace traced) lowered by :func:`~torchstrata.runtime.symbolic_lowering.symbolic_lowerer`
from the :class:`~torchstrata.runtime.dynamo_symbolic.DynamoTraces`, its lowerings kept
by a :class:`~torchstrata.runtime.size_variants.SizeVariants` as a symbolic entry's are. A
new size asks it first; where it refuses (the reason counted in ``size_lowering_stats()``
and told by :meth:`SharedLowerings.describe`, which ``explain()`` shows) the size is made
static and lowered on its own, as before. Each lowering is read from and stored in the
compiled-graph cache as a symbolic entry's is (:mod:`.symbolic_cache`, decision 0497): a
fresh process serves new sizes of the graph from the lowering another process made.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from torchstrata.core import CompileOptions, Graph
from torchstrata.core.symbolic import evaluate
from torchstrata.runtime.artifacts import GraphArtifacts
from torchstrata.runtime.dynamo_symbolic import DynamoTraces
from torchstrata.runtime.size_variants import SizeVariants, count
from torchstrata.runtime.symbolic_cache import cached_lowerer
from torchstrata.runtime.symbolic_lowering import LoweringStages, symbolic_lowerer

#: A runner for one size from a shared lowering (Dynamo's arguments in, the FX graph's
#: output structure out) and what records its first call's failure.
SharedRunner = tuple[Callable[..., Any], Callable[[Exception], None]]


def inputs_match(graph: Graph, inputs: Sequence[Any], values: Mapping[str, int]) -> bool:
    """Whether ``inputs`` are tensors with the dtypes and devices of ``graph``'s inputs
    (symbolic sizes) and the sizes and strides those evaluate to at ``values`` (the
    strides of dimensions longer than 1)."""
    if len(inputs) != len(graph.inputs):
        return False
    for node, value in zip(graph.inputs, inputs, strict=True):
        meta = node.tensor_meta
        if not isinstance(value, torch.Tensor) or (value.dtype, value.device) != (
            meta.dtype,
            meta.device,
        ):
            return False
        shape = tuple(evaluate(size, values) for size in meta.shape)
        if shape != tuple(value.shape):
            return False
        strides = (evaluate(stride, values) for stride in meta.strides)
        # a dimension of size 1 has any stride (no element is a step along it)
        if any(n > 1 and a != b for n, a, b in zip(shape, strides, value.stride(), strict=True)):
            return False
    return True


class SharedLowerings:
    """The lowerings of one Dynamo graph that serve many sizes.

    :param pipeline: the runtime's pipeline (its stages lower the graph).
    :param traces: the graph's symbolic autograd traces; ``traces.graph`` is the graph
        with symbolic sizes whose inputs are Dynamo's arguments at ``kept``.
    :param options: the compile options.
    :param kept: the positions of Dynamo's arguments that are the graph's inputs (the
        size symbols' arguments are not).
    :param structure: list/tuple when Dynamo's graph returns a sequence, None for one value.
    """

    def __init__(
        self,
        pipeline: LoweringStages,
        traces: DynamoTraces,
        options: CompileOptions,
        kept: tuple[int, ...],
        structure: type | None,
    ) -> None:
        self.graph = graph = traces.graph
        self.traces = traces
        self.kept = kept
        self.structure = structure
        lower = symbolic_lowerer(pipeline, graph, options, functools.partial(_traced, traces))
        # each lowering read from and stored in the compiled-graph cache (decision 0497)
        plugin_manager = getattr(pipeline, "plugin_manager", None)
        manager = None if plugin_manager is None else functools.partial(plugin_manager, options)
        lower = cached_lowerer(lower, graph, options, manager, traces.first)
        self.variants = SizeVariants(lower, options.symbolic_lowerings)
        #: sizes served by a shared lowering / made static and lowered on their own
        self.served = 0
        self.per_size = 0
        #: why sizes were refused before the lowering was asked (reason -> sizes)
        self.refusals: collections.Counter[str] = collections.Counter()
        #: the first lowering's artifacts (for ``explain()``), once one was made
        self.artifacts: GraphArtifacts | None = None

    def runner_for(self, values: Mapping[str, int], args: Sequence[Any]) -> SharedRunner | None:
        """The runner of a shared lowering that serves the sizes ``values`` (a call's
        arguments ``args``), made now where none does; None: the size lowers on its own.
        ``values`` are named as Dynamo names its symbols."""
        values = self.traces.ours(values)
        inputs = [args[i] for i in self.kept]
        made = None
        outside = self.traces.outside_import(values)
        if outside:
            self._refuse(f"sizes that break a condition the import relied on: {outside}")
        elif not inputs_match(self.graph, inputs, values):
            self._refuse("the arguments' layouts are not the symbolic graph's inputs'")
        else:
            made = self.variants.lowering_for(values)
        if made is None:
            self.per_size += 1
            return None
        self.served += 1
        runner = made.runner
        if self.artifacts is None:
            first = made.compiled[0] if made.compiled else None
            prims, compiled = (first.graph, first.compiled) if first else (None, None)
            self.artifacts = GraphArtifacts(self.graph, None, prims, None, compiled, runner)
        call = _dynamo_call(runner, self.structure, self.kept)
        return call, functools.partial(self.variants.first_call_failed, values, runner)

    def _refuse(self, reason: str) -> None:
        self.refusals[reason] += 1
        count(f"fallback: {reason}")

    def describe(self) -> str:
        """How this graph's sizes were lowered, and why sizes were lowered on their own."""
        made = len(self.variants.variants)
        text = f"{self.served} size(s) served by {made} lowering(s) shared by many sizes"
        if not self.per_size:
            return text
        failed = [what for what in self.variants.counts if what.startswith("fallback: ")]
        reasons = sorted({*(what.removeprefix("fallback: ") for what in failed), *self.refusals})
        return f"{text}; {self.per_size} lowered on their own: {'; '.join(reasons)}"


def _traced(traces: DynamoTraces) -> DynamoTraces:
    """``traces``, their first trace made now where none was yet.

    :raises NotImplementedError: the autograd stage made no symbolic trace (the size,
        and the graph's later sizes, lower on their own; the reason is counted)."""
    made = traces.first()
    if made is None:
        raise NotImplementedError("no symbolic trace of the Dynamo graph")
    return made


def _dynamo_call(
    runner: Callable[..., Any], structure: type | None, kept: tuple[int, ...]
) -> Callable[..., Any]:
    """Dynamo's arguments in (the size symbols' dropped), the FX graph's structure out."""

    def call(*args: Any) -> Any:
        results = runner(*[args[i] for i in kept])
        return results[0] if structure is None else structure(results)

    return call


def kept_positions(placeholders: Sequence[Any], example_inputs: Sequence[Any]) -> tuple[int, ...]:
    """The positions of Dynamo's arguments that stay inputs of the graph imported with
    its size symbols folded (:func:`~torchstrata.runtime.dynamo_sizes.concretised`, and
    :func:`~torchstrata.runtime.dynamo_symbolic.symbolic_import`): all but the symbols."""
    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)
    kept = []
    for position, (node, example) in enumerate(zip(placeholders, example_inputs, strict=True)):
        value = node.meta.get("example_value", node.meta.get("val"))
        if not isinstance(value if isinstance(value, symbolic) else example, symbolic):
            kept.append(position)
    return tuple(kept)
