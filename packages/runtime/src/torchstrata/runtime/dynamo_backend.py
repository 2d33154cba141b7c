"""``torch.compile(model, backend="torchstrata")``: Dynamo's capture, our later stages.

Declared as entry point ``torchstrata`` in group ``torch_dynamo_backends``. Imports
nothing from ``torch._dynamo``: the FX graph Dynamo hands over is converted with
:func:`torchstrata.core.from_fx` and compiled by the runtime's own
:meth:`~torchstrata.runtime.pipeline.Pipeline.compile_graph`, as ``compile()`` compiles
its captured graphs: ``post_capture`` passes, the autograd stage (joint trace and
partition), decomposition and codegen of the forward, the backward on its first call.
Training steps therefore run generated kernels both ways.

Dynamo guards every graph it hands over (grad mode, ``requires_grad`` and sizes of
each input...), so the choice between an inference and a training graph, made from the
example inputs, holds for every call Dynamo routes here. A graph with sizes Dynamo
made symbolic runs under Dynamo's symbolic guards (:mod:`torchstrata.runtime.dynamo_sizes`),
lowered once for every size that meets the conditions of the runtime's symbolic lowering
(:mod:`torchstrata.runtime.dynamo_shared`, decision 0455), and once per distinct size
where that lowering refuses.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx

from torchstrata.core import (
    AotResult,
    CompileOptions,
    Graph,
    current_options,
    enabled_autocast,
    from_fx,
)
from torchstrata.runtime.artifacts import GraphArtifacts
from torchstrata.runtime.compile_trace import compile_trace
from torchstrata.runtime.dynamo_options import backend_options
from torchstrata.runtime.dynamo_record import BackendGraph, dynamo_guards
from torchstrata.runtime.dynamo_shared import SharedLowerings, kept_positions
from torchstrata.runtime.dynamo_sizes import (
    PerSizeGraph,
    StaticGraph,
    is_symbolic,
    specialise,
    symbol_slots,
)
from torchstrata.runtime.dynamo_symbolic import DynamoTraces, symbolic_import
from torchstrata.runtime.errors import CompilationError, TorchstrataFallbackWarning
from torchstrata.runtime.fallback import warn_once
from torchstrata.runtime.pipeline import Pipeline
from torchstrata.runtime.size_variants import count
from torchstrata.runtime.symbolic_traces import lower_from_traces

logger = logging.getLogger("torchstrata.runtime")

_PIPELINE = Pipeline()


def _output_structure(gm: torch.fx.GraphModule) -> type | None:
    """list/tuple when the FX graph returns a sequence, None for a single value."""
    for node in gm.graph.nodes:
        if node.op == "output":
            value = node.args[0]
            return type(value) if isinstance(value, list | tuple) else None
    return tuple


def _compiled_call(
    artifacts: GraphArtifacts, structure: type | None, kept: tuple[int, ...] | None
) -> Callable[..., Any]:
    """Dynamo's arguments in, the FX graph's output structure out."""
    runner = artifacts.runner

    def compiled(*args: Any) -> Any:
        if kept is not None:
            args = tuple(args[i] for i in kept)  # size symbols were folded into the graph
        results = runner(*args)
        return results[0] if structure is None else structure(results)

    return compiled


def _fall_back(
    gm: torch.fx.GraphModule, reason: str, options: CompileOptions, error: BaseException | None
) -> BackendGraph:
    if options.fullgraph:
        raise CompilationError(
            f"torchstrata dynamo backend (fullgraph=True): {reason}", stage="dynamo"
        ) from error
    warnings.warn(
        f"torchstrata dynamo backend: {reason}; running this graph eagerly",
        TorchstrataFallbackWarning,
        stacklevel=3,
    )
    return BackendGraph(gm, None, reason)


def _static(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: CompileOptions
) -> StaticGraph | BackendGraph:
    """``gm`` with Dynamo's size symbols specialised, or the eager fallback when they
    cannot be (one warning per process)."""
    if not is_symbolic(gm, example_inputs):
        return StaticGraph(gm, tuple(example_inputs))
    try:
        static = specialise(gm, example_inputs)
    except Exception as error:  # any failure runs the graph eagerly
        reason = (
            f"Dynamo traced this graph with symbolic sizes that cannot be specialised "
            f"({type(error).__name__}: {error}); torchstrata has no dynamic shapes yet"
        )
        if options.fullgraph:
            raise CompilationError(f"torchstrata dynamo backend: {reason}") from error
        warn_once(
            ("dynamo-symbolic-sizes",),
            f"torchstrata dynamo backend: {reason}; running such graphs eagerly",
            stacklevel=4,
        )
        return BackendGraph(gm, None, reason)
    logger.info(
        "dynamo backend: symbolic sizes specialised to this call's values (Dynamo "
        "recompiles for other sizes)"
    )
    return static


def _per_size(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: CompileOptions
) -> BackendGraph | None:
    """``gm``, traced with symbolic sizes, run by a :class:`PerSizeGraph`: each size
    served by a lowering shared by many sizes where one serves it (decision 0455), else
    lowered on its own (this call's sizes now, others on their first call); None when a
    symbol cannot be read from the arguments or none is left (Dynamo specialised every
    symbol of its ``SymInt`` values: decision 0492); the caller specialises under
    Dynamo's guards instead."""
    try:
        slots = symbol_slots(gm, example_inputs)
    except ValueError as error:
        logger.info("dynamo backend: %s; specialising the graph to this call's sizes", error)
        return None
    if not slots:  # Dynamo specialised every symbol (its guards fix the sizes): static
        logger.debug("dynamo backend: no size symbol left; one static lowering")
        return None
    structure = _output_structure(gm)
    made: list[GraphArtifacts] = []
    traces, untraced = _symbolic_traces(gm, example_inputs, slots, options)
    shared = _shared(gm, example_inputs, traces, untraced, options, structure)

    def lower(static: StaticGraph) -> Callable[..., Any]:
        graph = from_fx(static.gm, list(static.examples))
        with compile_trace("a Dynamo graph for one size", options):
            artifacts = _lower_from_traces(graph, traces, static.sizes, options)
        made.append(artifacts)
        return _compiled_call(artifacts, structure, static.kept)

    per_size = PerSizeGraph(gm, slots, lower, shared=None if shared is None else shared.runner_for)
    try:
        per_size.runner_for(example_inputs)  # this call's sizes, as a static graph would
    except Exception as error:  # noqa: BLE001 - any failure falls back to the FX graph
        return _fall_back(gm, f"{type(error).__name__}: {error}", options, error)
    first = made[0] if made else shared.artifacts if shared is not None else None
    logger.info(
        "dynamo backend: symbolic sizes %s lowered %s (no Dynamo recompile)",
        ", ".join(slots),
        "once for many sizes" if not made else "per size",
    )
    run = _SizeFallback(per_size, gm, strict=options.fullgraph)
    graph = BackendGraph(gm, first, "", run, dynamo_guards(), strict=options.fullgraph)
    if shared is not None:
        graph.size_lowering = shared.describe
    else:
        why = f"no symbolic trace ({untraced})"
        why = why if options.symbolic_lowering else "option off"
        graph.size_lowering = _per_size_only(per_size, why)
    return graph


def _shared(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    traces: DynamoTraces | None,
    untraced: str,
    options: CompileOptions,
    structure: type | None,
) -> SharedLowerings | None:
    """The lowerings of ``gm`` shared by many sizes (decision 0455); None where the
    option ``symbolic_lowering`` is off or ``gm`` has no symbolic trace (``untraced``
    says why; counted in ``size_lowering_stats()``)."""
    if not options.symbolic_lowering:
        return None
    if traces is None:
        if untraced:  # (none where no size is symbolic: one lowering serves every call)
            count(f"fallback: no symbolic trace of the Dynamo graph ({untraced})")
        return None
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    kept = kept_positions(placeholders, example_inputs)
    return SharedLowerings(_PIPELINE, traces, options, kept, structure)


def _per_size_only(per_size: PerSizeGraph, why: str) -> Callable[[], str]:
    def describe() -> str:
        return f"{per_size.lowered} size(s) lowered on their own: {why}"

    return describe


def _symbolic_traces(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    slots: Mapping[str, tuple[int, int | None]],
    options: CompileOptions,
) -> tuple[DynamoTraces | None, str]:
    """The symbolic autograd traces of ``gm`` for every size (decision 0256; the first
    made at its first use: ``DynamoTraces.first``), or None where ``gm`` does not import
    with symbolic sizes (each size is traced on its own, with a debug line saying why),
    and why not."""
    if not slots:
        return None, ""  # nothing symbolic: one static lowering is all
    conditions: list[Any] = []
    names: dict[str, str] = {}
    try:
        graph = symbolic_import(gm, example_inputs, slots, conditions, names)
    except Exception as error:  # noqa: BLE001 - optional: sizes are traced on their own
        why = f"{type(error).__name__}: {str(error)[:160]}"
        logger.debug("dynamo backend: each size traced on its own (%s)", why)
        return None, why

    def trace(hints: Mapping[str, int] | None) -> Any:
        with compile_trace("a Dynamo graph with symbolic sizes", options):
            return _PIPELINE.trace_symbolic(graph, options, hints)

    shared_from = options.shared_decomposition_from
    # the first trace is made where a size needs it (``DynamoTraces.first``): not where
    # the lowering for the size is read from the compiled-graph cache (decision 0497)
    made = DynamoTraces(graph, trace, shared_from=shared_from, conditions=conditions, names=names)
    return made, ""


def _lower_from_traces(
    graph: Graph,
    traces: DynamoTraces | None,
    sizes: Mapping[str, int] | None,
    options: CompileOptions,
) -> GraphArtifacts:
    """``graph`` (one size's static graph) compiled, its autograd result taken from a
    symbolic trace at ``sizes`` where one serves them; a lowering from a trace that
    fails is retried from the size's own trace."""
    if traces is None or sizes is None:
        return _PIPELINE.compile_graph(graph, options)

    def lower(graph: Graph, aot: Callable[[], AotResult | None] | None = None) -> GraphArtifacts:
        return _PIPELINE.compile_graph(graph, options, aot)

    return lower_from_traces(lower, graph, lambda: traces.at_static(sizes, graph), sizes)


class _SizeFallback:
    """Calls a :class:`PerSizeGraph`; a size whose lowering or first run fails runs
    ``gm`` eagerly from then on, with a warning (re-raised under ``strict``)."""

    def __init__(self, per_size: PerSizeGraph, gm: torch.fx.GraphModule, strict: bool) -> None:
        self.per_size = per_size
        self.gm = gm
        self.strict = strict
        self.checked: set[tuple[int, ...]] = set()

    def __call__(self, *args: Any) -> Any:
        key = self.per_size.key(args)
        if key in self.checked:
            return self.per_size.runners.get(key, self.gm.forward)(*args)
        try:
            result = self.per_size.runner_for(args)(*args)
        except Exception as error:
            if self.strict or not self.checked:  # the first size: BackendGraph falls back
                raise
            self.per_size.runners[key] = self.gm.forward
            self.checked.add(key)
            warnings.warn(
                f"torchstrata dynamo backend: sizes {key} failed ({type(error).__name__}: "
                f"{error}); running the graph eagerly for them",
                TorchstrataFallbackWarning,
                stacklevel=3,
            )
            return self.gm.forward(*args)
        self.checked.add(key)
        return result


def torchstrata_backend(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any
) -> Callable[..., Any]:
    """Compile a Dynamo FX graph with the installed torchstrata stages.

    ``kwargs`` are what ``torch.compile`` passes: ``mode=`` and ``options=`` (a dict of
    :class:`~torchstrata.core.CompileOptions` fields, see
    :mod:`torchstrata.runtime.dynamo_options`), applied over
    :func:`~torchstrata.core.current_options`. A graph that cannot be converted or
    whose compilation fails in a stage runs eagerly (``gm.forward``) with a
    :class:`TorchstrataFallbackWarning`; compiled code that raises on its first call
    does too. With ``options={"fullgraph": True}`` those raise
    :class:`~torchstrata.runtime.CompilationError` instead.

    :raises BackendOptionError: an unknown or unsupported option (named).
    """
    options = backend_options(current_options(), kwargs)
    if enabled_autocast():
        # Dynamo's graph holds no autocast casts (our capture writes them; this graph is
        # not ours): run it under the caller's autocast. Dynamo guards autocast, so a
        # call without it compiles anew.
        fallback = _fall_back(
            gm, "autocast is enabled and Dynamo's graph holds no autocast casts", options, None
        )
        fallback.dynamo_guards = dynamo_guards()
        return fallback
    if is_symbolic(gm, example_inputs):
        per_size = _per_size(gm, example_inputs, options)
        if per_size is not None:
            if not per_size.is_compiled:
                per_size.dynamo_guards = dynamo_guards()
            return per_size
    static = _static(gm, example_inputs, options)
    if isinstance(static, BackendGraph):
        static.dynamo_guards = dynamo_guards()
        return static
    try:
        graph = from_fx(static.gm, list(static.examples))
        with compile_trace("a Dynamo graph", options) as trace:
            trace.produced("dynamo", graph)  # the graph as Dynamo handed it over
            artifacts = _PIPELINE.compile_graph(graph, options)
    except Exception as error:  # noqa: BLE001 - any failure falls back to the FX graph
        fallback = _fall_back(gm, f"{type(error).__name__}: {error}", options, error)
        fallback.dynamo_guards = dynamo_guards()
        return fallback
    compiled = _compiled_call(artifacts, _output_structure(gm), static.kept)
    # Read after specialising: the guards include the sizes it fixed.
    guards = dynamo_guards()
    return BackendGraph(gm, artifacts, "", compiled, guards, strict=options.fullgraph)
