"""The stage pipeline for one frame: capture, passes, aot, decompose, codegen.

Stages are found only through the plugin manager. A stage that is not installed (its
hook answers None) leaves the best graph reached so far to the reference interpreter;
a stage that raises is reported as :class:`~torchstrata.runtime.errors.StageFailure`
for the caller to fall back or re-raise.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import pluggy
import torch

from torchstrata.core import (
    NO_CONTRACT,
    AotResult,
    CaptureResult,
    CompiledGraph,
    CompileOptions,
    Graph,
    GraphContract,
    GraphPass,
    Level,
    PassManager,
    PassRecord,
    SymbolicAot,
    create_plugin_manager,
    dynamo_import_deferred,
    eliminate_dead_code,
    enabled_autocast,
    graph_has_symbols,
    interpret,
)
from torchstrata.runtime import graph_cache
from torchstrata.runtime.artifacts import (
    AotSource,
    FrameArtifacts,
    GraphArtifacts,
    Lowered,
    SizedAot,
)
from torchstrata.runtime.autocast_off import autocast_off, without_autocast
from torchstrata.runtime.cache import FrameRunner
from torchstrata.runtime.compile_trace import compile_trace, current_trace, function_title
from torchstrata.runtime.cuda_graphs import CudaGraphed, records_cuda_graphs
from torchstrata.runtime.dynamic_shapes import SizeSpecialisedRunner, dynamic_log
from torchstrata.runtime.errors import StageFailure
from torchstrata.runtime.fallback import warn_once
from torchstrata.runtime.forward_contracts import forward_contract, saved_layouts
from torchstrata.runtime.inference import without_requires_grad
from torchstrata.runtime.input_checks import alias_safe, offset_safe
from torchstrata.runtime.runners import (
    GraphFn,
    LazyGraphFn,
    inference_runner,
    training_runner,
)
from torchstrata.runtime.stage_plugins import (
    STAGE_PROVIDERS,
    load_plugins_one_by_one,
    missing_stage_message,
)
from torchstrata.runtime.symbolic_decomp import SharedPrims
from torchstrata.runtime.symbolic_lowering import runner_lowerer
from torchstrata.runtime.unit_scale import BoundDirectLaunch


def _interpreter(graph: Graph) -> Callable[..., tuple[Any, ...]]:
    def run(*inputs: Any) -> tuple[Any, ...]:
        return interpret(graph, *inputs)

    return run


def _reduce_overhead(forward: Lowered, options: CompileOptions) -> GraphFn:
    """``forward.fn``, recorded as a CUDA graph after its warm-up calls under
    ``mode="reduce-overhead"`` (or ``"max-autotune"``) when it is compiled code for CUDA
    inputs that draws no random numbers (:mod:`torchstrata.runtime.cuda_graphs`)."""
    graph = forward.prims_graph
    if forward.interpreted or graph is None:
        return forward.fn
    if not records_cuda_graphs(graph, _first_device(graph), options.mode):
        return forward.fn
    return CudaGraphed(forward.fn, "an inference graph")


def _first_device(graph: Graph) -> torch.device:
    for meta in graph.input_metas:
        return meta.device
    return torch.device("cpu")


class Pipeline:
    """Drives the stages found through a plugin manager.

    :param plugin_manager: use this manager (tests, embedders); by default one is made
        per set of ``options.blocked_plugins`` from the installed entry points.
    """

    def __init__(self, plugin_manager: pluggy.PluginManager | None = None) -> None:
        self._fixed = plugin_manager
        self._managers: dict[frozenset[str], pluggy.PluginManager] = {}

    def plugin_manager(self, options: CompileOptions) -> pluggy.PluginManager:
        """The manager for these options (blocked plugins are never registered)."""
        if self._fixed is not None:
            return self._fixed
        blocked = frozenset(options.blocked_plugins)
        if blocked not in self._managers:
            try:
                manager = create_plugin_manager(blocked=blocked)
            except Exception:  # noqa: BLE001 - one broken plugin must not break compile()
                manager = load_plugins_one_by_one(blocked)
            self._managers[blocked] = manager
        return self._managers[blocked]

    # ------------------------------------------------------------------ stages

    def capture(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: CompileOptions,
    ) -> CaptureResult | None:
        """Run the capture hook; None when no capture plugin is installed. Graphs the
        program captures later, after a graph break, are compiled on their first run by
        this pipeline (:meth:`compile_graph`)."""
        manager = self.plugin_manager(options)
        trace = current_trace()

        def compile_segment(graph: Graph) -> Any:
            return self._deferred_compile(graph, options)

        try:
            with trace.stage("capture") if trace else contextlib.nullcontext():
                result = manager.hook.torchstrata_capture(
                    fn=fn,
                    args=args,
                    kwargs=kwargs,
                    options=options,
                    compile_segment=compile_segment,
                )
        except Exception as error:
            raise StageFailure("capture", error) from error
        if trace is not None:
            trace.produced("capture", result)
        if result is not None and not isinstance(result, CaptureResult):
            raise StageFailure(
                "capture", TypeError(f"returned {type(result).__name__}, not CaptureResult")
            )
        return result

    def run_passes(
        self, stage: str, graph: Graph, options: CompileOptions, records: list[PassRecord]
    ) -> Graph:
        """Collect every plugin's passes for ``stage`` and run them through a PassManager."""
        manager = self.plugin_manager(options)
        try:
            contributed = manager.hook.torchstrata_graph_passes(stage=stage, options=options)
            passes: list[GraphPass] = [p for group in contributed if group for p in group]
            if not passes:
                return graph
            trace = current_trace()
            pass_manager = PassManager(
                passes,
                debug=options.debug,
                validate=options.validate_passes,
                blocked=options.blocked_plugins,
                observer=trace.after_pass if trace is not None else None,
            )
            result = pass_manager.run(graph, stage)
        except Exception as error:
            raise StageFailure(stage, error) from error
        records.extend(pass_manager.records)
        return result

    def _call_stage(
        self, stage: str, options: CompileOptions, symbolic: bool = False, **kwargs: Any
    ) -> Any:
        hook_name, _ = STAGE_PROVIDERS[stage]
        if symbolic:  # the stage's hook for graphs with symbolic sizes
            hook_name += "_symbolic"
        hook = getattr(self.plugin_manager(options).hook, hook_name)
        trace = current_trace()
        try:
            with trace.stage(stage) if trace else contextlib.nullcontext():
                result = hook(options=options, **kwargs)
        except Exception as error:
            raise StageFailure(stage, error) from error
        if trace is not None:
            trace.produced(stage, result)
        return result

    def codegen(
        self, graph: Graph, options: CompileOptions, device: torch.device, contract: GraphContract
    ) -> CompiledGraph | None:
        """The codegen stage's compilation of the prims ``graph`` (sizes static, or
        ``core.SizeValue``: a lowering for many sizes) for ``device`` under ``contract``;
        None where no stage returned a ``CompiledGraph``. Raises ``StageFailure`` where
        the stage raises."""
        made = self._call_stage("codegen", options, graph=graph, device=device, contract=contract)
        return made if isinstance(made, CompiledGraph) else None

    def _missing(self, stage: str, options: CompileOptions, fallback: str) -> None:
        message = missing_stage_message(stage, self.plugin_manager(options), fallback)
        warn_once(("missing-stage", stage), message, stacklevel=6)

    def lower(
        self,
        aten_graph: Graph,
        options: CompileOptions,
        records: list[PassRecord],
        contract: GraphContract = NO_CONTRACT,
        shared: SharedPrims | None = None,
    ) -> Lowered:
        """Decompose and generate code for one ATen graph, as far as the stages go, under
        ``contract`` (what the runner promises about the graph). ``shared``, asked where
        the graph cache has no lowering of ``aten_graph``, gives its prims graph (a
        symbolic decomposition at the graph's sizes, decision 0280) before the decomp
        stage is asked; its None asks the stage."""
        if options.codegen == "eager":
            return Lowered(_interpreter(aten_graph))
        manager = self.plugin_manager(options)
        cached = graph_cache.lookup_lowered(aten_graph, options, manager, contract)
        if cached.hit is not None:
            prims_graph = cached.hit.prims_graph
        else:
            prims = shared(contract) if shared is not None else None
            if prims is None:
                prims = self._call_stage("decomp", options, graph=aten_graph, contract=contract)
            if prims is None:
                self._missing("decomp", options, "running ATen graphs in the reference interpreter")
                return Lowered(_interpreter(aten_graph), missing_stages=("decomp",))
            if isinstance(prims, Graph) and contract.input_layouts:
                self._check_layouts(prims, contract)
            prims_graph = self.run_passes("post_decomp", prims, options, records)
        device = _first_device(prims_graph)
        compiled = graph_cache.load_compiled(cached, device, options, manager)
        if compiled is None:
            compiled = self._call_stage(
                "codegen", options, graph=prims_graph, device=device, contract=contract
            )
            if compiled is None or isinstance(compiled, CompiledGraph):
                graph_cache.store_lowered(cached, prims_graph, compiled, options)
        if compiled is None:
            self._missing("codegen", options, "running prims graphs in the reference interpreter")
            return Lowered(_interpreter(prims_graph), prims_graph, missing_stages=("codegen",))
        if not isinstance(compiled, CompiledGraph):
            error = TypeError(f"returned {type(compiled).__name__}, not CompiledGraph")
            raise StageFailure("codegen", error)
        return Lowered(compiled, prims_graph, compiled, interpreted=False)

    @staticmethod
    def _check_layouts(prims: Graph, contract: GraphContract) -> None:
        """Raise :class:`StageFailure` unless the decomposition built ``prims`` for the
        contract's input layouts: kernels generated for others would index those inputs
        wrongly."""
        try:
            followed = contract.follows_layouts(prims)
        except ValueError as error:
            raise StageFailure("decomp", error) from error
        if not followed:
            ignored = ValueError(
                "returned a graph whose inputs ignore the contract's input_layouts"
            )
            raise StageFailure("decomp", ignored)

    def compile_graph(
        self,
        graph: Graph,
        options: CompileOptions,
        aot: AotSource | None = None,
    ) -> GraphArtifacts:
        """Take one torch-level graph as far down the pipeline as the installed stages go
        (an ATen-level graph skips the capture passes and the autograd stage). ``aot``,
        asked where the graph cache has no autograd result for ``graph``, gives one
        before the autograd stage is asked (a symbolic trace's result at ``graph``'s
        sizes, :meth:`trace_symbolic`); its None asks the stage.

        Under autocast the stages run, and the runner runs the graph, with autocast off
        (the capture wrote its casts into the graph: :mod:`.autocast_off`)."""
        devices = tuple(device for device, _ in enabled_autocast())
        if not devices:
            return self._compile_graph(graph, options, aot)
        with autocast_off(devices):
            artifacts = self._compile_graph(graph, options, aot)
        return attrs.evolve(artifacts, runner=without_autocast(artifacts.runner, devices))

    def trace_symbolic(
        self, graph: Graph, options: CompileOptions, hints: Mapping[str, int] | None = None
    ) -> SymbolicAot | None:
        """The autograd stage's one trace of ``graph`` (torch level, symbolic sizes) for
        every size (decision 0220), its decisions on sizes taken for ``hints`` (symbol
        name -> size; None: the capture's sizes), under the conditions
        :meth:`compile_graph` runs the stage in (grad mode, autocast off); None where it
        cannot be used (the reason in a debug log line): the graph is then traced per
        size."""
        devices = tuple(device for device, _ in enabled_autocast())
        with autocast_off(devices) if devices else contextlib.nullcontext():
            return self._trace_symbolic(graph, options, hints)

    def _trace_symbolic(
        self, graph: Graph, options: CompileOptions, hints: Mapping[str, int] | None
    ) -> SymbolicAot | None:
        manager = self.plugin_manager(options)
        why = ""
        passes = manager.hook.torchstrata_graph_passes(stage="post_capture", options=options)
        if any(passes):
            why = "post_capture passes run on each size's graph"
        elif not manager.hook.torchstrata_aot_symbolic.get_hookimpls():
            why = "no autograd plugin implements torchstrata_aot_symbolic"
        if why:
            dynamic_log.debug("the symbolic graph is traced per size: %s", why)
            return None
        if not torch.is_grad_enabled():
            graph = without_requires_grad(graph)
        try:
            traced = self._call_stage("autograd", options, graph=graph, symbolic=True, hints=hints)
        except StageFailure as failure:
            error = failure.__cause__
            dynamic_log.debug(
                "the symbolic graph is traced per size: its symbolic trace failed (%s: %s)",
                type(error).__name__,
                error,
            )
            return None
        if not isinstance(traced, SymbolicAot):
            dynamic_log.debug("the symbolic graph is traced per size: no symbolic trace")
            return None
        dynamic_log.debug(
            "one trace serves every size; it relied on %d size conditions: %s",
            len(traced.guards),
            ", ".join(map(str, traced.guards)),
        )
        return traced

    def _compile_graph(
        self,
        graph: Graph,
        options: CompileOptions,
        traced: AotSource | None = None,
    ) -> GraphArtifacts:
        records: list[PassRecord] = []
        if not torch.is_grad_enabled():
            graph = without_requires_grad(graph)
        cached: graph_cache.Lookup | None = None
        sized: SizedAot | None = None  # a symbolic trace's result and its decomposition
        if graph.level is Level.ATEN:  # already functional ATen (e.g. from Dynamo via from_fx)
            torch_graph = graph
            aot: AotResult | None = AotResult(forward=graph)
        else:
            torch_graph = self.run_passes("post_capture", graph, options, records)
            cached = graph_cache.lookup_aot(torch_graph, options, self.plugin_manager(options))
            if cached.hit:
                aot = cached.hit.aot
            else:
                # the symbolic trace's result at these sizes (it traced the graph before
                # the capture passes: none may have changed it)
                found = traced() if traced is not None and torch_graph is graph else None
                if isinstance(found, SizedAot):
                    sized, found = found, found.aot
                aot = found
                if aot is None:
                    aot = self._call_stage("autograd", options, graph=torch_graph)
        if aot is None:
            fallback = "running torch-level graphs in the reference interpreter"
            self._missing("autograd", options, fallback)
            return GraphArtifacts(
                torch_graph,
                None,
                None,
                None,
                None,
                _interpreter(torch_graph),
                ("autograd",),
                tuple(records),
                interpreted=True,
            )
        if not isinstance(aot, AotResult):
            raise StageFailure(
                "autograd", TypeError(f"returned {type(aot).__name__}, not AotResult")
            )
        if cached is not None and cached.hit is not None:
            aten_graph = cached.hit.aten_graph
        else:
            aten_graph = self.run_passes("post_aot", aot.forward, options, records)
            if cached is not None:
                graph_cache.store_aot(cached, aot, aten_graph, options)
        needs_grad = torch.is_grad_enabled() and any(
            m.requires_grad for m in torch_graph.input_metas
        )
        forward = self.lower(
            aten_graph,
            options,
            records,
            forward_contract(aot, inference=not needs_grad),
            # the post_aot passes changed nothing: the symbolic forward's decomposition
            shared=self._shared_prims(sized, "forward", options)
            if aten_graph is aot.forward
            else None,
        )
        missing = forward.missing_stages
        backward: LazyGraphFn | None = None
        if not needs_grad:
            fn = _reduce_overhead(forward, options)
            runner, interpreted = inference_runner(fn, aot), forward.interpreted
            runner = alias_safe(runner, _interpreter(torch_graph), aot)
        elif aot.backward is None:
            # No backward from the autograd stage: the torch-level graph keeps gradients right.
            runner, interpreted = _interpreter(torch_graph), True
        else:
            saved = saved_layouts(aot, forward)
            contract = GraphContract(input_layouts=saved)
            backward = self._lazy_graph(
                aot.backward,
                options,
                "backward graph",
                contract=contract,
                shared=self._shared_prims(sized, "backward", options),
            )
            plain = self._lazy_plain_forward(aten_graph, aot, options)
            hook = getattr(self.plugin_manager(options).hook, "torchstrata_direct_launch", None)
            launch = None if hook is None else BoundDirectLaunch.of(hook, options)
            runner = training_runner(
                forward.fn, backward, aot, plain, saved_layouts=saved, direct_launch=launch
            )
            runner = alias_safe(runner, _interpreter(torch_graph), aot)
            runner = offset_safe(runner, _interpreter(torch_graph), aot)
            interpreted = forward.interpreted
        return GraphArtifacts(
            torch_graph,
            aten_graph,
            forward.prims_graph,
            aot,
            forward.compiled,
            runner,
            missing,
            tuple(records),
            interpreted,
            backward_fn=backward,
        )

    def _lazy_graph(
        self,
        graph: Graph,
        options: CompileOptions,
        what: str,
        passes: bool = True,
        contract: GraphContract = NO_CONTRACT,
        shared: SharedPrims | None = None,
    ) -> LazyGraphFn:
        """``graph`` through ``post_aot`` (unless ``passes`` is False), decomp and codegen
        (under ``contract``) on its first call; if that fails, it runs in the interpreter
        with a warning (raises under ``fullgraph=True``). ``shared`` gives the prims graph
        where the ``post_aot`` passes left ``graph`` as it is (see :meth:`lower`); a
        lowering from it that fails is lowered again without it."""

        def build() -> GraphFn:
            records: list[PassRecord] = []
            with dynamo_import_deferred(), compile_trace(what, options):
                aten_graph = (
                    self.run_passes("post_aot", graph, options, records) if passes else graph
                )
                if shared is not None and aten_graph is graph:
                    try:
                        return self.lower(aten_graph, options, records, contract, shared).fn
                    except Exception as error:  # noqa: BLE001 - decomposed on its own below
                        dynamic_log.debug(
                            "lowering the %s from the symbolic decomposition failed (%s: %s): "
                            "decomposing it on its own",
                            what,
                            type(error).__name__,
                            error,
                        )
                return self.lower(aten_graph, options, records, contract).fn

        fallback = None if options.fullgraph else _interpreter(graph)
        return LazyGraphFn(build, fallback, what=what)

    def _shared_prims(
        self, sized: SizedAot | None, which: str, options: CompileOptions
    ) -> SharedPrims | None:
        """The prims graph of ``sized``'s ``which`` graph from its trace's one
        decomposition (:class:`~torchstrata.runtime.symbolic_decomp.SharedDecomposition`),
        under the contract asked for; None without a shared decomposition."""
        if sized is None:
            return None
        shared, values = sized.shared, sized.values
        decompose = self.decomposer(options)

        def prims(contract: GraphContract) -> Graph | None:
            return shared.at(which, values, contract, decompose)

        return prims

    def decomposer(self, options: CompileOptions) -> Callable[[Graph, GraphContract], Graph | None]:
        """The decomposition stage as ``(graph, contract) -> prims graph`` (None where
        no stage decomposed it)."""

        def decompose(graph: Graph, contract: GraphContract) -> Graph | None:
            prims = self._call_stage("decomp", options, graph=graph, contract=contract)
            return prims if isinstance(prims, Graph) else None

        return decompose

    def _lazy_plain_forward(
        self, forward: Graph, aot: AotResult, options: CompileOptions
    ) -> LazyGraphFn | None:
        """``forward`` (after ``post_aot``) without its unit gradients, compiled when a
        backward is first seeded with something other than 1 (None without unit
        gradients)."""
        if not aot.num_unit_grads:
            return None
        outputs = forward.outputs[: len(forward.outputs) - aot.num_unit_grads]
        plain = eliminate_dead_code(Graph(forward.level, forward.inputs, forward.nodes, outputs))
        return self._lazy_graph(plain, options, "forward without unit gradients", passes=False)

    def _deferred_compile(self, graph: Graph, options: CompileOptions) -> Any:
        """The runner of a graph compiled after the frame (a segment after a break); a
        graph with symbolic sizes is lowered per size or once for many
        (:class:`SizeSpecialisedRunner`)."""
        if graph_has_symbols(graph):

            def lower(static: Graph, aot: AotSource | None = None) -> Any:
                with dynamo_import_deferred(), compile_trace("a graph after a break", options):
                    return self.compile_graph(static, options, aot).runner

            def trace(symbolic: Graph, hints: Mapping[str, int] | None) -> SymbolicAot | None:
                with dynamo_import_deferred(), compile_trace("a graph after a break", options):
                    return self.trace_symbolic(symbolic, options, hints)

            symbolic = runner_lowerer(self, options) if options.symbolic_lowering else None
            return SizeSpecialisedRunner(
                graph,
                lower,
                trace=trace,
                shared_from=options.shared_decomposition_from,
                lower_symbolic=symbolic,
                max_symbolic=options.symbolic_lowerings,
            ).call
        with dynamo_import_deferred(), compile_trace("a graph after a graph break", options):
            return self.compile_graph(graph, options).runner

    def compile_frame(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: CompileOptions,
        captured: CaptureResult | None = None,
    ) -> FrameArtifacts:
        """Capture ``fn`` for this call (or take ``captured``, a capture of it made
        already) and compile every graph it holds.

        Runs under :func:`~torchstrata.core.dynamo_import_deferred`, as do the graphs
        compiled later (segments after a graph break, backward graphs): meta and fake
        tensor calls would otherwise import Dynamo, seconds of a cold start.
        """
        with dynamo_import_deferred(), compile_trace(function_title(fn), options):
            return self._compile_frame(fn, args, kwargs, options, captured)

    def _compile_frame(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: CompileOptions,
        captured: CaptureResult | None = None,
    ) -> FrameArtifacts:
        capture = captured or self.capture(fn, args, kwargs, options)
        if capture is None:
            return FrameArtifacts(
                None, (), None, "torchstrata-capture is not installed", ("capture",)
            )
        if not capture.graphs and capture.program is None:
            reasons = "; ".join(str(b) for b in capture.graph_breaks) or "capture found no graph"
            return FrameArtifacts(capture, (), None, reasons)
        if capture.program is None:
            raise StageFailure("capture", ValueError("capture returned graphs but no program"))
        try:
            graphs = tuple(self.compile_graph(graph, options) for graph in capture.graphs)
        except StageFailure as failure:
            failure.capture = capture
            raise
        runners = [artifacts.runner for artifacts in graphs]
        program = capture.program
        missing = tuple(dict.fromkeys(s for g in graphs for s in g.missing_stages))
        # ``run(args, kwargs)`` is ``program(runners, args, kwargs)``, without a frame of ours.
        run: FrameRunner = functools.partial(program, runners)
        direct = capture.direct_program
        run_inputs = functools.partial(direct, runners) if direct is not None else None
        return FrameArtifacts(capture, graphs, run, missing_stages=missing, run_inputs=run_inputs)
