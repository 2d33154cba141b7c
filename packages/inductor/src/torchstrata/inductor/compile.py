"""``compile_graph``: a prims graph to a :class:`~torchstrata.core.CompiledGraph`."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import attrs
import torch

from torchstrata.core import (
    CompiledGraph,
    CompileOptions,
    Graph,
    Level,
    Node,
    PassManager,
    PassRecord,
    current_options,
    eliminate_common_subexpressions,
    same_layout,
)
from torchstrata.inductor.codegen.backend import Backend, build_all
from torchstrata.inductor.codegen.registry import BackendSpec, CodegenError, choose_backend
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.launch.launcher import build_launcher, generate_launcher
from torchstrata.inductor.passes.graph_passes import common_passes
from torchstrata.inductor.schedule.lowering import Extern, Lowered, dense_strides, lower_graph
from torchstrata.inductor.schedule.plan import Plan, plan_graph
from torchstrata.inductor.schedule.plan_passes import run_plan_passes
from torchstrata.inductor.schedule.scheduler import ExternStep, buffer_strides

#: The name in ``CompileOptions.blocked_plugins`` that keeps shared values inlined
#: (:mod:`~torchstrata.inductor.schedule.shared_values`): for measuring the rule.
SHARED_VALUES = "inductor.shared_values"

#: The ``stage`` of the records of the inductor's graph passes.
PASS_STAGE = "inductor"


def compile_graph(
    graph: Graph,
    device: torch.device | str | None = None,
    options: CompileOptions | None = None,
    backends: Mapping[str, BackendSpec] | None = None,
) -> CompiledGraph:
    """Compile a prims-level ``graph`` (extern ATen nodes allowed) for ``device`` with the
    backend ``options.codegen`` names among ``backends`` (default: the built-in ones; the
    pipeline passes every registered one).

    Returns a :class:`CompiledGraph` whose ``fn(*inputs)`` returns a tuple of tensors, with
    one :class:`KernelInfo` per generated kernel, the extern ops run eagerly, and the
    generated launcher's source.
    """
    if graph.level is not Level.PRIMS:
        raise CodegenError(
            f"compile_graph takes a prims-level graph, got level {graph.level.value}"
        )
    options = options if options is not None else current_options()
    if device is None:
        device = graph.inputs[0].tensor_meta.device if graph.inputs else torch.device("cpu")
    backend = choose_backend(device, options, backends)
    if backend is None:
        raise CodegenError(
            f"codegen={options.codegen!r} is not a code generator (eager runs without codegen)"
        )
    return compile_with(graph, backend, options)


def compile_with(graph: Graph, backend: Backend, options: CompileOptions) -> CompiledGraph:
    """Compile a prims-level ``graph`` with ``backend`` (see :func:`compile_graph`)."""
    if graph.level is not Level.PRIMS:
        raise CodegenError(
            f"compile_graph takes a prims-level graph, got level {graph.level.value}"
        )
    start = time.perf_counter()
    scheduled = schedule_graph(graph, backend, options)
    graph, plan = scheduled.graph, scheduled.plan
    launches, infos, compile_seconds = {}, [], 0.0
    kernels = [step for step in plan.steps if isinstance(step, Kernel) and step.rows > 0]
    for step, built in zip(kernels, build_all(backend, kernels, options), strict=True):
        launches[step.name] = built.launch
        infos.append(built.info)
        compile_seconds += built.compile_seconds
    write_backs = options.stage("inductor").get("write_backs")
    relaid = _relaid_outputs(scheduled.promised, graph.outputs, plan)
    source, env = generate_launcher(graph, plan, launches, write_backs, relaid)
    fn = build_launcher(source, env)
    eager_ops = tuple(
        str(step.node.op)
        for step in plan.steps
        if isinstance(step, ExternStep) and not _allocated_only(plan.lowered[step.node])
    )
    stats = {
        "backend": backend.name,
        "kernels": len(infos),
        "compile_seconds": compile_seconds,
        "codegen_seconds": time.perf_counter() - start,
        "passes": scheduled.records,
    }
    return CompiledGraph(fn, tuple(infos), eager_ops, stats, source)


@attrs.frozen
class Scheduled:
    """A graph rewritten and planned for one backend.

    ``promised``: the outputs the graph promised (after common subexpressions are merged);
    ``graph``: the rewritten graph; ``plan``: its kernels and extern steps; ``records``:
    what each graph and plan pass did.
    """

    promised: tuple[Node, ...]
    graph: Graph
    plan: Plan
    records: tuple[PassRecord, ...]


def schedule_graph(
    graph: Graph, backend: Backend, options: CompileOptions | None = None
) -> Scheduled:
    """The graph rewritten for ``backend``, and its plan of kernels and extern steps.

    The rewrites are named passes (the common ones of
    :mod:`~torchstrata.inductor.passes.graph_passes` and the backend's own) run by core's
    pass manager under ``options`` (debug, validate_passes, blocked_plugins), then the
    backend's plan passes.
    """
    options = options if options is not None else current_options()
    graph = eliminate_common_subexpressions(graph)
    promised = graph.outputs
    manager = PassManager(
        (*common_passes(), *backend.graph_passes()),
        debug=options.debug,
        validate=options.validate_passes,
        blocked=options.blocked_plugins,
    )
    graph = manager.run(graph, stage=PASS_STAGE)
    lowered = lower_graph(graph, backend.supports)
    plan = plan_graph(graph, lowered, SHARED_VALUES not in options.blocked_plugins)
    plan, records = run_plan_passes(plan, backend.plan_passes(), options.blocked_plugins)
    return Scheduled(tuple(promised), graph, plan, (*manager.records, *records))


def _allocated_only(lowered: Lowered) -> bool:
    """A shape template (:mod:`.templates`): allocated by the launcher, no ATen op run."""
    return isinstance(lowered, Extern) and lowered.allocate_only


def _relaid_outputs(
    promised: Sequence[Node], outputs: Sequence[Node], plan: Plan
) -> dict[int, tuple[int, ...]]:
    """``{output index: strides}`` of the outputs that the rewrites above left in another
    dense layout than the graph's own output (``gather_as_reduction`` builds a gather's
    value anew, with the layout inferred for the new nodes): each is copied back into
    the layout its original node would have been stored with."""
    relaid = {}
    for index, (before, after) in enumerate(zip(promised, outputs, strict=True)):
        meta = before.tensor_meta
        if after is before or meta is None or after.tensor_meta is None:
            continue
        want = dense_strides(meta.shape, meta.strides)
        have = buffer_strides(after, plan.lowered[after]) if after in plan.lowered else None
        if have is not None and not same_layout(meta.shape, have, want):
            relaid[index] = want
    return relaid
