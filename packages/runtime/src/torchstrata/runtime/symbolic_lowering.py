"""A symbolic entry's graph lowered once for many sizes (issue 33, decision 0381).

The forward of the entry's symbolic trace (decision 0220) is decomposed once with its
sizes symbolic (decision 0280), its ``SymInt`` sizes become ``core.SizeValue`` sizes of
one ``core.SizeGuards`` (hints: the call's sizes), and the codegen stage compiles that
graph. The result serves every size that meets the trace's conditions, the
decomposition's and those the codegen recorded (:class:`~.size_variants.SizeVariants`).

Only what the per-size path does the same way at every size is lowered so: an inference
forward, or a training graph's forward and backward (with one ``SizeGuards``,
:mod:`.symbolic_training`, decision 0395). Write-backs (an input updated in place: a
batch norm's running statistics, a KV cache, ``p.add_(g)``) are copied into the inputs at
any size; outputs that view an input or another output are rebuilt with their sizes,
strides and offsets evaluated at each call's sizes (:mod:`.symbolic_outputs`, decision
0445). A graph under autocast (the entry's guards hold the autocast state) is lowered,
and runs, with autocast off, as the per-size path does: the capture wrote the casts into
it (decision 0446). Anything else raises ``NotImplementedError`` (the entry lowers per
size). Both lower so on the CPU and on CUDA devices, by every codegen: C++ kernels, and
Triton kernels (CUDA, or ``codegen="triton"`` on the CPU: the interpreter; training
graphs since decision 0440). Triton kernels are generated during the lowering, the
backward's with the forward's, and on a GPU the specialisation Triton compiles each
binary for is a condition of the lowering, so no later size it serves meets a compile of
its own (decision 0400).

Every mode lowers so: under ``mode="reduce-overhead"`` (or ``"max-autotune"``) an inference
forward for CUDA inputs records one CUDA graph per distinct size over the one lowering
(:class:`~.cuda_graphs.SizeGraphs`, decision 0456); elsewhere the mode changes nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs
import torch

from torchstrata.core import (
    CompiledGraph,
    CompileOptions,
    Graph,
    GraphContract,
    PassRecord,
    SizeGuards,
    SizeRead,
    SymbolicAot,
    dynamo_import_deferred,
    enabled_autocast,
    input_symbol_slots,
    sized_graph,
)
from torchstrata.core.size_values import conditions_check
from torchstrata.runtime.autocast_off import autocast_off, without_autocast
from torchstrata.runtime.compile_trace import compile_trace, current_trace
from torchstrata.runtime.cuda_graphs import graphed_per_size
from torchstrata.runtime.forward_contracts import forward_contract
from torchstrata.runtime.inference import grad_off as _grad_off
from torchstrata.runtime.runners import inference_runner, output_layout
from torchstrata.runtime.size_variants import (
    CompiledPart,
    LowerSymbolic,
    SizeSpecificFailure,
    SymbolicLowering,
)
from torchstrata.runtime.symbolic_cache import cached_lowerer
from torchstrata.runtime.symbolic_outputs import inputs_for_aliases, sized_outputs
from torchstrata.runtime.symbolic_recording import note_lowering
from torchstrata.runtime.symbolic_traces import SymbolicTraces
from torchstrata.runtime.symbolic_training import (
    refuse_training,
    symbolic_training_runner,
    with_size_carrier,
)


class LoweringStages(Protocol):
    """What a lowering for many sizes runs of the pipeline
    (:class:`~torchstrata.runtime.pipeline.Pipeline`)."""

    def run_passes(
        self, stage: str, graph: Graph, options: CompileOptions, records: list[PassRecord]
    ) -> Graph:
        """The plugins' passes of ``stage`` run over ``graph``."""

    def decomposer(self, options: CompileOptions) -> Callable[[Graph, GraphContract], Graph | None]:
        """The decomp stage as ``(ATen graph, contract) -> prims graph`` (None: none)."""

    def codegen(
        self, graph: Graph, options: CompileOptions, device: torch.device, contract: GraphContract
    ) -> CompiledGraph | None:
        """The codegen stage's compilation of a prims graph (None: none compiled it)."""


def runner_lowerer(
    pipeline: LoweringStages, options: CompileOptions
) -> Callable[[Any], LowerSymbolic]:
    """``lower_symbolic`` of a :class:`~.dynamic_shapes.SizeSpecialisedRunner` (an
    entry's graph, or a segment's after a graph break): its graph lowered by
    :func:`symbolic_lowerer` from its symbolic traces (made at the first lowering), each
    lowering read from and stored in the compiled-graph cache (:mod:`.symbolic_cache`,
    decision 0450), Dynamo's import deferred."""
    plugin_manager = getattr(pipeline, "plugin_manager", None)
    manager = None if plugin_manager is None else functools.partial(plugin_manager, options)

    def lower_symbolic(runner: Any) -> LowerSymbolic:
        lower = symbolic_lowerer(pipeline, runner.graph, options, runner.symbolic_traces)
        made = cached_lowerer(lower, runner.graph, options, manager, runner.symbolic_traces)

        def deferred(values: Mapping[str, int]) -> SymbolicLowering:
            with dynamo_import_deferred():
                return made(values)

        return deferred

    return lower_symbolic


def symbolic_lowerer(
    pipeline: LoweringStages,
    graph: Graph,
    options: CompileOptions,
    traces: Callable[[], SymbolicTraces | None],
) -> LowerSymbolic:
    """``lower(values)``: ``graph`` (torch level, symbolic sizes) lowered by
    ``pipeline``'s stages at the sizes ``values`` for every size that meets what it
    relied on; ``traces()`` gives the entry's symbolic traces (None: there are none).
    The lowering holds the graphs it compiled (``SymbolicLowering.compiled``)."""

    slots = input_symbol_slots(graph)

    def lower(values: Mapping[str, int]) -> SymbolicLowering:
        # traced as a compile of its own (or a part of the one in progress): the debug
        # directory and the logs get its passes' graphs, its sized prims graphs and its
        # kernels (decision 0494)
        with compile_trace("a lowering for many sizes", options):
            return lower_traced(values)

    def lower_traced(values: Mapping[str, int]) -> SymbolicLowering:
        # under autocast (the entry's guards hold its state) the capture wrote the casts
        # into the graph: the stages run, and the runner runs, with autocast off, as the
        # per-size path's (``Pipeline.compile_graph``)
        devices = tuple(device for device, _ in enabled_autocast())
        if not devices:
            return lower_here(values)
        with autocast_off(devices):
            made = lower_here(values)
        return attrs.evolve(made, runner=without_autocast(made.runner, devices))

    def lower_here(values: Mapping[str, int]) -> SymbolicLowering:
        training = torch.is_grad_enabled() and any(m.requires_grad for m in graph.input_metas)
        made = traces()
        found = None if made is None else made.trace_for(values)
        if found is None:
            raise NotImplementedError("no symbolic partition serves these sizes")
        traced, shared = found
        aot = traced.at(values)
        num_user, mutated, _ = output_layout(aot)
        extra = len(mutated) + aot.num_saved + aot.num_unit_grads
        if num_user != len(aot.forward.outputs) - extra:
            raise NotImplementedError("a forward of other outputs than its partition says")
        # outputs that view inputs or each other: rebuilt at each call's sizes
        outputs_at = sized_outputs(slots, shared.result, aot, values)
        # no output carries a gradient (``loss.detach()``): an inference forward, run
        # with grad off (its outputs require none, as eager's)
        no_gradient = training and aot.backward is None and not aot.tangent_outputs
        if no_gradient:
            training = False
        elif training:
            refuse_training(aot)
        records: list[PassRecord] = []
        checked = (
            (aot.forward,) if not training or aot.backward is None else (aot.forward, aot.backward)
        )
        for which in checked:
            if pipeline.run_passes("post_aot", which, options, records) is not which:
                raise NotImplementedError("the post_aot passes change a graph: per size")
        contract = forward_contract(aot, inference=not training)
        decompose = pipeline.decomposer(options)
        # an inference forward returns an input where an output is rebuilt as a view of
        # it: no kernel computes values the runner throws away (decision 0445)
        made_from = None
        if not training and outputs_at is not None:
            result = shared.result
            made_from = functools.partial(
                inputs_for_aliases, aliases=result.output_aliases, views=result.output_views
            )
        decomposed = shared.symbolic("forward", contract, decompose, made_from)
        if decomposed is None:
            raise NotImplementedError("no symbolic decomposition of the forward")
        prims, conditions = decomposed
        backward = None
        if training:
            carried = functools.partial(with_size_carrier, forward=shared.result.forward)
            backward = shared.symbolic("backward", GraphContract(), decompose, carried)
            if backward is None:
                raise NotImplementedError("no symbolic decomposition of the backward")
            conditions = (*conditions, *backward[1])
        decided = conditions_check(conditions)
        if not decided(values):
            # the decomposition was made (once, cached) at other sizes and decided
            # otherwise here: a lowering from it would not serve these sizes. Sizes that
            # violate its conditions lower per size; the others are tried again.
            outside = NotImplementedError("the symbolic decomposition does not hold here")
            raise SizeSpecificFailure(lambda sizes: not decided(sizes)) from outside
        device = next(
            (node.tensor_meta.device for node in prims.inputs if node.meta is not None),
            torch.device("cpu"),
        )
        if device.type not in ("cpu", "cuda"):
            raise NotImplementedError(f"{device.type} kernels lower per size")

        parts: list[CompiledPart] = []

        def codegen(graph: Graph, contract: GraphContract) -> tuple[Graph, CompiledGraph]:
            sized = pipeline.run_passes("post_decomp", sized_graph(graph, guards), options, records)
            trace = current_trace()
            if trace is not None:  # printed by expression: the lowering decides the same
                trace.produced("prims-for-many-sizes", sized)
            compiled = pipeline.codegen(sized, options, device, contract)
            if compiled is None:
                raise NotImplementedError("no codegen stage compiled the symbolic graph")
            parts.append(CompiledPart(sized, device, compiled))
            return sized, compiled

        guards = SizeGuards(values)
        try:
            with guards.active():
                forward = codegen(prims, contract)
                if backward is None:
                    # the compiled graph itself where no CUDA graph wraps it: the runner
                    # calls its launcher with no frame between, as on the static path
                    fn = graphed_per_size(forward[1], forward[0], device, options.mode)
                    runner = inference_runner(fn, aot, outputs_at)
                    runner = _grad_off(runner) if no_gradient else runner
                else:
                    lowered = codegen(backward[0], GraphContract())
                    eager = functools.partial(_aten_backward, traced)
                    runner = symbolic_training_runner(
                        aot, forward, lowered, slots, outputs_at, eager
                    )
            if guards.refused:  # a site read a size as a number (even if it caught it)
                raise SizeRead(guards.refused[0])
        except Exception as error:
            if not guards.refused or not guards.conditions:
                raise  # a site not ported (any size), or no decision on a size led to it
            # a read of a size: sizes that meet the decisions taken up to it (a pinned
            # size's included) read it the same way; others take another path and are
            # tried again
            raise SizeSpecificFailure(_serves(traced, (*conditions, *guards.conditions))) from error
        finally:
            guards.close()  # memos made on its sizes serve no other lowering
        return _lowering(traced, conditions, guards, runner, mutated, tuple(parts))

    return lower


def _aten_backward(traced: SymbolicAot, values: Mapping[str, int]) -> Graph | None:
    """The ATen backward graph of ``traced``'s partition at the sizes ``values`` (static):
    what a first backward that raises falls back to (decision 0485)."""
    return traced.at(values).backward


def _lowering(
    traced: SymbolicAot,
    conditions: tuple[Any, ...],
    guards: SizeGuards,
    runner: Callable[..., Any],
    writes: tuple[int, ...],
    compiled: tuple[CompiledPart, ...],
) -> SymbolicLowering:
    """The lowering with every condition it relied on: the trace's, the symbolic
    decomposition's and the codegen's (``guards``); ``writes``: the inputs it writes;
    ``compiled``: the graphs it compiled."""
    relied = (*conditions, *guards.conditions)
    note_lowering(traced, relied)  # for the compiled-graph cache's entry
    serves = _serves(traced, relied)
    text = tuple(map(str, relied))
    return SymbolicLowering(runner, serves, text, writes=writes, compiled=compiled)


def _serves(traced: SymbolicAot, relied: tuple[Any, ...]) -> Callable[[Mapping[str, int]], bool]:
    """Whether sizes meet the trace's conditions and ``relied``."""
    holds = conditions_check(relied)

    def serves(values: Mapping[str, int]) -> bool:
        return holds(values) and not traced.violated(values)

    return serves
