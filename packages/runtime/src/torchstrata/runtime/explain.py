"""``explain()``: what the compiler makes of one call, without touching the caches."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from torchstrata.core import (
    COMPLEX_REASON,
    CompileOptions,
    Graph,
    GraphBreak,
    Guard,
    KernelInfo,
    OpKind,
    PassRecord,
    global_state,
    touches_complex,
    unsupported_state,
)
from torchstrata.core.guard_text import describe_guard
from torchstrata.runtime.artifacts import FrameArtifacts, GraphArtifacts
from torchstrata.runtime.compile_trace import compile_trace, function_title
from torchstrata.runtime.dynamic_shapes import compile_symbolic
from torchstrata.runtime.errors import StageFailure
from torchstrata.runtime.pipeline import Pipeline


@attrs.frozen
class ExplainReport:
    """What compiling one call produced.

    ``graphs`` are the torch-level graphs (after ``post_capture`` passes);
    ``aten_graphs`` and ``prims_graphs`` hold, per graph, the ATen forward and the prims
    graph (None where the pipeline stopped earlier). ``kernels`` are the generated and
    extern kernels, each with its ``source``; ``eager_ops`` the ops that run eagerly
    (extern calls the backend left to ATen, and every op of a graph run by the
    reference interpreter). ``fallback`` says why the whole call runs eagerly ("" if
    it does not). ``dynamo_guards``: for a model compiled by Dynamo with the torchstrata
    backend, Dynamo's guards as Dynamo names them, with the values they check where the
    call's arguments give them (``guards`` holds torchstrata's own). ``pass_records``:
    every graph pass run for the graphs (name, stage, seconds, node counts);
    ``stage_seconds``: (stage, seconds) for each stage that ran during this call (empty
    for graphs compiled before it, as Dynamo's may be).
    """

    graphs: tuple[Graph, ...] = ()
    aten_graphs: tuple[Graph | None, ...] = ()
    prims_graphs: tuple[Graph | None, ...] = ()
    graph_breaks: tuple[GraphBreak, ...] = ()
    guards: tuple[Guard, ...] = ()
    kernels: tuple[KernelInfo, ...] = ()
    eager_ops: tuple[str, ...] = ()
    ops_per_graph: tuple[tuple[str, ...], ...] = ()
    missing_stages: tuple[str, ...] = ()
    fallback: str = ""
    #: For a compiled function: the guard each cached entry fails for this call.
    guard_failures: tuple[str, ...] = ()
    #: For a compiled function: why each earlier recompile happened (first failed guard).
    recompile_reasons: tuple[str, ...] = ()
    dynamo_guards: tuple[str, ...] = ()
    pass_records: tuple[PassRecord, ...] = ()
    stage_seconds: tuple[tuple[str, float], ...] = ()
    #: ``"op: reason"`` for ATen ops the decomposition kept for a reason of their own
    #: (an op that touches complex values: prims are real-valued).
    eager_reasons: tuple[str, ...] = ()
    #: The options the call was compiled with (their stage options are printed).
    options: CompileOptions | None = None
    #: What the on-disk compiled-graph cache did for each part of the compile, in order
    #: (``"autograd: hit"``, ``"backward graph: decomposition: miss"``, ...): a graph
    #: whose parts all hit came from the cache (see :mod:`.graph_cache`).
    graph_cache: tuple[str, ...] = ()
    #: For graphs with symbolic sizes that Dynamo handed over: how each one's sizes were
    #: lowered (lowerings shared by many sizes, sizes lowered on their own and why).
    size_lowerings: tuple[str, ...] = ()

    @property
    def from_graph_cache(self) -> bool:
        """Whether every stage after capture came from the compiled-graph cache."""
        events = [event for event in self.graph_cache if not event.endswith(": stored")]
        return bool(events) and all(event.endswith(": hit") for event in events)

    @property
    def graph_count(self) -> int:
        """Number of captured graphs."""
        return len(self.graphs)

    @property
    def graph_break_count(self) -> int:
        """Number of graph breaks."""
        return len(self.graph_breaks)

    def __str__(self) -> str:
        lines = [
            f"torchstrata explain: {self.graph_count} graph(s), "
            f"{self.graph_break_count} graph break(s), {len(self.kernels)} kernel(s)"
        ]
        if self.fallback:
            lines.append(f"runs eagerly: {self.fallback}")
        if self.options is not None:
            lines.append(f"codegen: {self.options.codegen or 'by device'}")
            lines.append(f"inductor options: {self.options.inductor}")
            lines.append(f"autograd options: {self.options.autograd}")
        if self.missing_stages:
            lines.append(f"missing stages: {', '.join(self.missing_stages)}")
        for graph_break in self.graph_breaks:
            lines.append(f"  break: {graph_break}")
        for reason in self.recompile_reasons:
            lines.append(f"  recompiled: guard failed: {reason}")
        for failure in self.guard_failures:
            lines.append(f"  this call: guard failed: {failure}")
        for index, ops in enumerate(self.ops_per_graph):
            lines.append(f"graph {index}: {len(ops)} op(s): {', '.join(ops)}")
        for kernel in self.kernels:
            where = f" at {kernel.path}" if kernel.path else ""
            lines.append(
                f"  kernel {kernel.name} [{kernel.backend}]{where}: {', '.join(kernel.ops)}"
            )
        if self.eager_ops:
            lines.append(f"eager ops: {', '.join(self.eager_ops)}")
        lines += [f"  eager: {reason}" for reason in self.eager_reasons]
        if self.guards or not self.dynamo_guards:
            lines.append(f"{len(self.guards)} guard(s):")
            lines += [f"  {describe_guard(guard)}" for guard in self.guards]
        if self.dynamo_guards:
            lines.append(f"{len(self.dynamo_guards)} Dynamo guard(s):")
            lines += [f"  {guard}" for guard in self.dynamo_guards]
        if self.size_lowerings:
            lines.append("symbolic sizes:")
            lines += [f"  {text}" for text in self.size_lowerings]
        if self.graph_cache:
            verdict = "from the cache" if self.from_graph_cache else "compiled"
            lines.append(f"compiled-graph cache ({verdict}):")
            lines += [f"  {event}" for event in self.graph_cache]
        if self.stage_seconds:
            lines.append("compile time per stage:")
            lines += [f"  {name}: {seconds * 1000:.1f} ms" for name, seconds in self.stage_seconds]
        if self.pass_records:
            lines.append(f"{len(self.pass_records)} pass(es):")
            lines += [f"  {record}" for record in self.pass_records]
        return "\n".join(lines)


def _eager_ops(artifacts: GraphArtifacts) -> list[str]:
    if artifacts.compiled is not None and not artifacts.interpreted:
        return list(artifacts.compiled.eager_ops)
    graph = artifacts.prims_graph or artifacts.aten_graph or artifacts.torch_graph
    if artifacts.interpreted and artifacts.compiled is not None:
        graph = artifacts.torch_graph  # autograd-recording graphs run their torch form
    return [op.name for op in graph.ops()]


def _eager_reasons(graphs: Sequence[GraphArtifacts]) -> tuple[str, ...]:
    """``"op: reason"`` for each distinct ATen op of the prims graphs kept for a reason
    that is not a missing rule (complex values)."""
    reasons: dict[str, str] = {}
    for artifacts in graphs:
        graph = artifacts.prims_graph
        if graph is None:
            continue
        for node in graph.nodes:
            if node.op is not None and node.op.kind is OpKind.ATEN and touches_complex(node):
                reasons.setdefault(node.op.name, COMPLEX_REASON)
    return tuple(f"{op}: {reason}" for op, reason in reasons.items())


def report_from_graphs(graphs: Sequence[GraphArtifacts]) -> ExplainReport:
    """Summarise compiled graphs: graphs, kernels (the backward's included, compiled
    now if no backward ran yet), ops left to eager, ops per graph."""
    return ExplainReport(
        graphs=tuple(g.torch_graph for g in graphs),
        aten_graphs=tuple(g.aten_graph for g in graphs),
        prims_graphs=tuple(g.prims_graph for g in graphs),
        kernels=tuple(
            kernel
            for g in graphs
            for compiled in (g.compiled, g.backward_compiled)
            if compiled is not None
            for kernel in compiled.kernels
        ),
        eager_ops=tuple(op for g in graphs for op in _eager_ops(g)),
        ops_per_graph=tuple(tuple(op.name for op in g.torch_graph.ops()) for g in graphs),
        pass_records=tuple(record for g in graphs for record in g.pass_records),
        eager_reasons=_eager_reasons(graphs),
    )


def report_from_artifacts(frame: FrameArtifacts) -> ExplainReport:
    """Summarise a compiled frame."""
    capture = frame.capture
    return attrs.evolve(
        report_from_graphs(frame.graphs),
        graph_breaks=capture.graph_breaks if capture else (),
        guards=capture.guards if capture else (),
        missing_stages=frame.missing_stages,
        fallback=frame.eager_reason if frame.run is None else "",
    )


def explain_call(
    pipeline: Pipeline,
    options: CompileOptions,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    symbolic: Mapping[str, Sequence[int]] | None = None,
) -> ExplainReport:
    """Compile ``fn`` for this call afresh and report; stage failures, and a global
    state the compiler cannot reproduce, go in ``fallback``.

    With ``symbolic`` (source -> dims, the plan the dynamic-shape policy makes for this
    call), the guards are the symbolic entry's (static sizes, each symbol >= 2 and the
    size relations the trace relied on), from a capture with those dims symbolic; the
    graphs and kernels are this call's sizes', which the entry lowers for them."""
    report = _explain_call(pipeline, options, fn, args, kwargs)
    if not symbolic or report.fallback:
        return report
    entry = compile_symbolic(pipeline, fn, args, kwargs, options, symbolic)
    if entry is None or entry.capture is None:  # not symbolic-capable: static, as a compile
        return report
    return attrs.evolve(report, guards=entry.capture.guards)


def _explain_call(
    pipeline: Pipeline,
    options: CompileOptions,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> ExplainReport:
    refused = unsupported_state(global_state())
    if refused is not None:
        return ExplainReport(fallback=refused)
    with compile_trace(function_title(fn), options) as trace:
        try:
            frame = pipeline.compile_frame(fn, args, kwargs, options)
        except StageFailure as failure:
            capture = failure.capture
            return ExplainReport(
                graphs=capture.graphs if capture else (),
                graph_breaks=capture.graph_breaks if capture else (),
                guards=capture.guards if capture else (),
                fallback=str(failure),
                pass_records=tuple(trace.pass_records),
                stage_seconds=tuple(trace.stage_seconds),
                options=options,
                graph_cache=tuple(trace.graph_cache),
            )
        # Built inside the trace: a backward compiled for the report is timed too.
        report = report_from_artifacts(frame)
        return attrs.evolve(
            report,
            pass_records=tuple(trace.pass_records),
            stage_seconds=tuple(trace.stage_seconds),
            options=options,
            graph_cache=tuple(trace.graph_cache),
        )
