"""``compile_graph``: a prims graph to a :class:`~torchstrata.core.CompiledGraph`."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch

from torchstrata.core import (
    NO_CONTRACT,
    CompiledGraph,
    CompileOptions,
    Graph,
    GraphContract,
    Level,
    Node,
    PassManager,
    PassRecord,
    TensorMeta,
    current_options,
    eliminate_common_subexpressions,
    python_source,
    same_layout,
    size_printer,
)
from torchstrata.inductor.codegen.backend import Backend, build_all
from torchstrata.inductor.codegen.registry import BackendSpec, CodegenError, choose_backend
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.launch.launcher import build_launcher, generate_launcher
from torchstrata.inductor.launch.native_alloc import launcher_allocator
from torchstrata.inductor.launch.package import load_package, make_package
from torchstrata.inductor.launch.sized_matmuls import matmul_calls
from torchstrata.inductor.passes.graph_passes import common_passes
from torchstrata.inductor.schedule.lowering import Extern, Lowered, dense_strides, lower_graph
from torchstrata.inductor.schedule.plan import Plan, plan_graph
from torchstrata.inductor.schedule.plan_passes import run_plan_passes
from torchstrata.inductor.schedule.scheduler import ExternStep, buffer_strides

#: The name in ``CompileOptions.blocked_plugins`` that keeps shared values inlined
#: (:mod:`~torchstrata.inductor.schedule.shared_values`): for measuring the rule.
SHARED_VALUES = "inductor.shared_values"
#: The name in ``CompileOptions.blocked_plugins`` that keeps column sums out of kernels over
#: other reduced dims or of their operand's kernel (``schedule.scheduler.same_rows_regrouped``,
#: ``sums_leading_dims``): for measuring the rules.
COLUMN_JOINS = "inductor.column_joins"

#: The ``stage`` of the records of the inductor's graph passes.
PASS_STAGE = "inductor"


def compile_graph(
    graph: Graph,
    device: torch.device | str | None = None,
    options: CompileOptions | None = None,
    backends: Mapping[str, BackendSpec] | None = None,
    contract: GraphContract = NO_CONTRACT,
) -> CompiledGraph:
    """Compile a prims-level ``graph`` (extern ATen nodes allowed) for ``device`` with the
    backend ``options.codegen`` names among ``backends`` (default: the built-in ones; the
    pipeline passes every registered one).

    Returns a :class:`CompiledGraph` whose ``fn(*inputs)`` returns a tuple of tensors, with
    one :class:`KernelInfo` per generated kernel, the extern ops run eagerly, the
    generated launcher's source, and the layouts of the outputs it returns. The
    ``contract``'s write-backs (outputs the caller copies into inputs) may be computed in
    place (:mod:`~torchstrata.inductor.launch.in_place`).
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
    return compile_with(graph, backend, options, contract)


def compile_with(
    graph: Graph,
    backend: Backend,
    options: CompileOptions,
    contract: GraphContract = NO_CONTRACT,
) -> CompiledGraph:
    """Compile a prims-level ``graph`` with ``backend`` (see :func:`compile_graph`)."""
    if graph.level is not Level.PRIMS:
        raise CodegenError(
            f"compile_graph takes a prims-level graph, got level {graph.level.value}"
        )
    start = time.perf_counter()
    # the launcher copies relaid outputs back: every output comes as the graph says
    output_layouts = tuple(
        node.meta if isinstance(node.meta, TensorMeta) else None for node in graph.outputs
    )
    scheduled = schedule_graph(graph, backend, options)
    graph, plan = scheduled.graph, scheduled.plan
    launches, infos, records, compile_seconds = {}, [], [], 0.0
    kernels = [step for step in plan.steps if isinstance(step, Kernel) and step.rows > 0]
    for step, built in zip(kernels, build_all(backend, kernels, options), strict=True):
        launches[step.name] = built.launch
        infos.append(built.info)
        records.append(built.record)
        compile_seconds += built.compile_seconds
    relaid = _relaid_outputs(scheduled.promised, graph.outputs, plan)
    write_backs = contract.write_back_inputs()
    externs = [step.node for step in plan.steps if isinstance(step, ExternStep)]
    matmuls = matmul_calls(externs, options.inductor.onednn_matmuls)
    with size_printer(python_source):  # sizes with ``//`` or ``%`` in them (0407)
        source, env = generate_launcher(graph, plan, launches, write_backs, relaid, matmuls)
    fn = build_launcher(source, env, launcher_allocator(options))
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
    handles = [launches[step.name].handle for step in kernels]
    ops = {node.op for node in graph.nodes if node.op is not None}
    package = (
        make_package(
            backend.name, source, env, handles, records, infos, eager_ops, ops, output_layouts
        )
        if hasattr(backend, "load_kernels")
        else None
    )
    return CompiledGraph(fn, tuple(infos), eager_ops, stats, source, output_layouts, package)


def load_compiled(
    package: Mapping[str, Any], backend: Backend, options: CompileOptions
) -> CompiledGraph:
    """The compiled graph that :func:`compile_with` saved as ``package`` (its
    :attr:`~torchstrata.core.CompiledGraph.package`), with ``backend``'s kernels loaded
    again: no rewriting, scheduling or code generation."""
    load_kernels = getattr(backend, "load_kernels", None)
    if load_kernels is None:
        raise CodegenError(f"backend {backend.name!r} cannot load saved kernels")
    return load_package(
        package, lambda records: load_kernels(records, options), launcher_allocator(options)
    )


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
    blocked = options.blocked_plugins
    plan = plan_graph(graph, lowered, SHARED_VALUES not in blocked, COLUMN_JOINS not in blocked)
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
