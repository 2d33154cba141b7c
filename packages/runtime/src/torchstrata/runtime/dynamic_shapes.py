"""Dynamic shapes in the runtime: which dimensions a compile makes symbolic, the guard
that checks a call's sizes against a symbolic entry, and the runner that lowers a
symbolic graph for each size it meets (decision 0200).

Policy, as torch.compile's: ``dynamic=None`` compiles static first and makes a
dimension symbolic when a compile sees it at a second size (automatic dynamic);
``dynamic=True`` makes every dimension symbolic from the first call; ``dynamic=False``
always specialises. :func:`mark_dynamic` / :func:`mark_static` override one tensor's
dimension (``dynamic=False`` wins over :func:`mark_dynamic`). Sizes 0 and 1 are always
specialised: such a call gets its own static entry. A Python ``int`` argument (exactly:
not a ``bool``) is decided as dimension 0 of its size carrier (``core.int_size_source``,
decision 0330; a negative int as its magnitude, a carrier per sign: decision 0385); so
are the ints in argument containers and
those captures read from module attributes and globals (:mod:`.int_sources`, decision
0365). An int carries no mark: the compile option ``dynamic_sources`` names it
(decision 0367).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs
import torch

from torchstrata.core import (
    GUARD_NAMESPACE,
    AotResult,
    CaptureResult,
    CompileOptions,
    Graph,
    Guard,
    SymbolicAot,
    SymbolicSizes,
    TensorMeta,
    artifact_logger,
    concretize_graph,
    container_ints,
    graph_has_symbols,
    graph_symbols,
    input_symbol_slots,
    int_argument_source,
    int_negative_source,
    int_size_source,
    interpret,
    is_negative_carrier_source,
    readable_source,
    size_guards,
)
from torchstrata.core.options import SHARED_DECOMPOSITION_FROM, SYMBOLIC_LOWERINGS
from torchstrata.runtime.artifacts import AotSource, FrameArtifacts, SizedAot
from torchstrata.runtime.dynamo_marks import dynamo_dynamic_dims, dynamo_static_dims
from torchstrata.runtime.first_calls import FirstCall
from torchstrata.runtime.int_sources import (
    STATIC_CLASS_ATTR,
    IntSources,
    exact_sources,
    named_dims,
    parse_dynamic_sources,
    static_attribute,
)
from torchstrata.runtime.size_routes import SizeRoutes
from torchstrata.runtime.size_variants import LowerSymbolic, SizeVariants, count
from torchstrata.runtime.symbolic_traces import SymbolicTraces, lower_from_traces

logger = logging.getLogger("torchstrata.runtime")
dynamic_log = artifact_logger(__name__, "dynamic")

_DYNAMIC_ATTR = "_torchstrata_dynamic_dims"
_STATIC_ATTR = "_torchstrata_static_dims"


def _marks(value: torch.Tensor, ours: str) -> set[int]:
    """The dimensions marked on ``value`` by this package's call (``ours``)."""
    return set(getattr(value, ours, ()))


def _check_dim(tensor: Any, dim: int) -> int:
    if type(tensor) is int:
        raise TypeError(
            "an int cannot carry a mark (it is a value, not an object of its own): name "
            "its source in the compile option dynamic_sources, as torch.compile's "
            "torch.compiler.config.dynamic_sources: "
            "compile(fn, options={'dynamic_sources': \"L['n']\"}); to keep a module's int "
            "attributes static, mark_static(ModuleClass)"
        )
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a tensor, got {type(tensor).__name__}")
    if not -tensor.dim() <= dim < max(tensor.dim(), 1):
        raise IndexError(f"dimension {dim} out of range for a tensor of rank {tensor.dim()}")
    return dim % tensor.dim()


def mark_dynamic(tensor: torch.Tensor, dim: int | Sequence[int]) -> None:
    """Compile ``tensor``'s dimension(s) ``dim`` as symbolic from the first call that
    passes it (unless ``dynamic=False``, or its size there is 0 or 1)."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    marked = set(getattr(tensor, _DYNAMIC_ATTR, set()))
    marked.update(_check_dim(tensor, d) for d in dims)
    setattr(tensor, _DYNAMIC_ATTR, marked)


def mark_static(tensor: torch.Tensor | type, dim: int | Sequence[int] | None = None) -> None:
    """Always specialise ``tensor``'s dimension(s) ``dim`` (all where None), even with
    ``dynamic=True``.

    Given an ``nn.Module`` class instead (as torch.compile's ``mark_static``), the int
    attributes of its instances (``self.n_heads``) stay constants, guarded by value, where
    they would become symbolic on a second value or by a ``dynamic_sources`` regex (decision
    0388): the int form of this mark."""
    if isinstance(tensor, type):
        if not issubclass(tensor, torch.nn.Module):
            raise TypeError(f"mark_static takes a tensor or an nn.Module class, not {tensor}")
        setattr(tensor, STATIC_CLASS_ATTR, True)
        return
    if dim is None:
        dim = range(tensor.dim()) if isinstance(tensor, torch.Tensor) else 0
    dims = [dim] if isinstance(dim, int) else list(dim)
    marked = set(getattr(tensor, _STATIC_ATTR, set()))
    marked.update(_check_dim(tensor, d) for d in dims)
    setattr(tensor, _STATIC_ATTR, marked)


class DynamicPolicy:
    """Decides, per compile, which dimensions of the arguments become symbolic.

    :param dynamic: the ``dynamic`` compile option (None, True or False).
    """

    def __init__(self, dynamic: bool | None, dynamic_sources: Sequence[str] = ()) -> None:
        self.dynamic = dynamic
        #: the compile option ``dynamic_sources`` parsed: (source or regex, dim or None)
        self.named = parse_dynamic_sources(dynamic_sources)
        self._exact = exact_sources(self.named)
        #: the ints beyond the arguments that captures read (decision 0365)
        self.int_sources = IntSources()
        #: (source, dim) -> the sizes compiles have seen it at
        self.seen: dict[tuple[str, int], set[int]] = {}
        #: the (source, dim) some plan made symbolic
        self.symbolic: set[tuple[str, int]] = set()
        #: the (source, dim, old sizes, new size) the last plan made symbolic for the
        #: first time on its own (automatic dynamic: a dimension seen at a second size,
        #: whether the first was 0, 1 or 2 or more)
        self.changed: list[tuple[str, int, tuple[int, ...], int]] = []
        #: the (source, dim, size) the last plan kept static for being 0 or 1
        self.specialised: list[tuple[str, int, int]] = []
        #: whether the last plan made a dimension symbolic, or met a size 0 or 1 of a
        #: dimension, for the first time: its compile is the policy's, not a recompile
        #: that ``recompile_limit`` counts (decision 0208)
        self.first_time = False

    def note(
        self,
        guards: Sequence[Guard],
        frame: Mapping[str, Any] | None = None,
        globals_: Mapping[str, Any] | None = None,
    ) -> bool:
        """Remember the ints a compile specialised on beyond the arguments (module
        attributes, globals: their guards name them), so later plans read them.

        True where one of them is new and named by a ``dynamic_sources`` regex (at a
        value other than 0, 1 and -1): the caller compiles again, so such an int is
        symbolic from the first call (decision 0387). ``dynamic=True`` alone does not:
        attribute and global ints are mostly configuration (``self.n_head``), which
        torch.compile keeps static too; they become symbolic on a second value.
        ``frame`` and ``globals_``: the call's, to tell the attributes of a class marked
        static (decision 0388)."""
        new = self.int_sources.note(guards)
        if self.dynamic is False or not self.named:
            return False
        namespace = {**GUARD_NAMESPACE, "L": frame or {}, "G": globals_ or {}}
        return any(
            abs(value) >= 2
            and named_dims(self.named, source, value)
            and not static_attribute(source, namespace)
            for source, value in new.items()
        )

    def _candidates(
        self, frame: Mapping[str, Any], globals_: Mapping[str, Any]
    ) -> Iterator[tuple[str, tuple[int, ...], set[int], set[int], bool]]:
        """(source, shape, static dims, marked dims, configuration) of every value the
        plan decides: the tensor and int arguments, the ints in argument containers and
        the ints read from elsewhere (an int as its size carrier, shape ``(value,)``;
        ``configuration``: an attribute's or a global's, which ``dynamic=True`` alone
        leaves static until its second value, decision 0472)."""
        ints: dict[str, int] = {}
        read: set[str] = set()
        for name, value in frame.items():
            source = f"L[{name!r}]"
            if type(value) in (torch.Tensor, torch.nn.Parameter):
                # torch.compile's marks count as ours (decision 0325)
                static = _marks(value, _STATIC_ATTR) | dynamo_static_dims(value)
                marked = _marks(value, _DYNAMIC_ATTR) | dynamo_dynamic_dims(value)
                marked |= named_dims(self.named, source, value) or set()
                yield source, tuple(value.shape), static, marked - static, False
            elif type(value) is int:
                ints[source] = value
            else:
                ints.update(container_ints(source, value))
        for source, value, seen in self.int_sources.values(frame, globals_, self._exact):
            if source not in ints:
                read.add(source)
            ints.setdefault(source, value)
            if seen is not None:  # the value the static capture saw
                self.seen.setdefault((_carrier_source(source, seen), 0), set()).add(abs(seen))
        for source, value in ints.items():
            # a negative int as its magnitude's carrier (decision 0385)
            marked = set(named_dims(self.named, source, value) or ())
            yield _carrier_source(source, value), (abs(value),), set(), marked, source in read

    def plan(
        self, frame: Mapping[str, Any], globals_: Mapping[str, Any] | None = None
    ) -> dict[str, tuple[int, ...]]:
        """Source (``L['x']``) -> dims to make symbolic for a compile of this call; the
        sizes are remembered for later calls' decisions. ``globals_``: the function's,
        for ints read from globals (decision 0365)."""
        plan: dict[str, tuple[int, ...]] = {}
        self.changed, self.specialised, self.first_time = [], [], False
        candidates = self._candidates(frame, globals_ or {})
        for source, shape, static, marked, configuration in candidates:
            # dynamic=True makes every argument dimension symbolic from the first call;
            # an attribute or global int (``self.n_heads``) waits for its second value
            everything = self.dynamic is True and not configuration
            dims = []
            for dim, size in enumerate(shape):
                seen = self.seen.setdefault((source, dim), set())
                earlier = tuple(sorted(seen))
                seen.add(size)
                if self.dynamic is False or dim in static:
                    continue
                if size < 2:
                    if everything or dim in marked or any(o != size for o in earlier):
                        self.specialised.append((source, dim, size))
                        self.first_time |= size not in earlier
                    continue
                if everything or dim in marked:
                    dims.append(dim)
                    self.symbolic.add((source, dim))
                elif any(old != size for old in earlier):
                    dims.append(dim)
                    # the first plan that makes it symbolic, not the first with two sizes
                    # of 2 or more: after a first call at 1 the second size is the one
                    if (source, dim) not in self.symbolic:
                        self.symbolic.add((source, dim))
                        self.changed.append((source, dim, earlier, size))
                        self.first_time = True
            if dims:
                plan[source] = tuple(dims)
        return plan

    def reason(self) -> str:
        """Why the last plan made dimensions symbolic (automatic dynamic) or kept a
        dimension of size 0 or 1 static, or ''."""
        made = [
            _made_symbolic(source, dim, earlier, size)
            for source, dim, earlier, size in self.changed
        ]
        kept = [
            f"{readable_source(f'{source}.size()[{dim}]')} is {size}: sizes 0 and 1 are specialised"
            for source, dim, size in self.specialised
        ]
        return "; ".join(made + kept)


def _carrier_source(source: str, value: int) -> str:
    """The source of the carrier of the int ``value`` read at ``source``: one per sign."""
    return int_negative_source(source) if value < 0 else int_size_source(source)


def _made_symbolic(source: str, dim: int, earlier: tuple[int, ...], size: int) -> str:
    was = ", ".join(map(str, earlier))
    argument = int_argument_source(source)
    if argument is not None:
        kind = "int argument" if _is_argument(argument) else "int"
        if is_negative_carrier_source(source):
            was = ", ".join(f"-{old}" for old in earlier)
            return f"{argument} is -{size}, was {was}: negative {kind} {argument} becomes symbolic"
        return f"{argument} is {size}, was {was}: {kind} {argument} becomes symbolic"
    return (
        f"{source}.size()[{dim}] is {size}, was {was}: dimension {dim} of {source} becomes symbolic"
    )


def _is_argument(source: str) -> bool:
    """Whether ``source`` is an argument itself (``L['n']``), not read from one."""
    return source.startswith("L[") and source.endswith("]") and source.count("[") == 1


#: Device types whose graphs get symbolic entries: the C++ backend's and Triton's (CUDA
#: graphs under ``mode="reduce-overhead"`` recorded per size, decision 0225).
SYMBOLIC_DEVICES = ("cpu", "cuda")


def _device_refusal(devices: set[str]) -> str:
    others = sorted(devices - set(SYMBOLIC_DEVICES))
    return f"only CPU and CUDA graphs are symbolic-capable, not {', '.join(others)}"


class SymbolicRefused(Exception):
    """A frame that cannot be compiled with symbolic sizes (yet): the message says why."""


def eligible(capture: CaptureResult, options: CompileOptions) -> None:
    """Raise :class:`SymbolicRefused` unless the symbolic capture can run as one graph
    lowered per size: what is not symbolic-capable yet compiles static per shape."""
    if capture.program is None or len(capture.graphs) != 1:
        found = f"{len(capture.graphs)} graphs" if capture.program is not None else "no program"
        breaks = "; ".join(str(broken) for broken in capture.graph_breaks[:3])
        raise SymbolicRefused(
            "only frames that start with a graph are symbolic-capable yet "
            f"(the symbolic capture made {found}{': ' + breaks if breaks else ''})"
        )
    graph = capture.graphs[0]
    devices = {m.device.type for m in graph.input_metas if isinstance(m, TensorMeta)}
    if devices - set(SYMBOLIC_DEVICES):
        raise SymbolicRefused(_device_refusal(devices))
    if not graph_has_symbols(graph):
        raise SymbolicRefused("no dimension stayed symbolic")
    unbound = graph_symbols(graph) - set(input_symbol_slots(graph))
    if unbound:
        raise SymbolicRefused(f"symbols {sorted(unbound)} are not sizes of a graph input")


def symbolic_guards(capture: CaptureResult, sizes: SymbolicSizes) -> tuple[Guard, ...]:
    """The capture's guards for a symbolic entry (:func:`torchstrata.core.size_guards`:
    a symbolic tensor guard checks only the type; one ``SizeCheck`` guard checks
    every symbolic input's sizes and the relations the trace relied on)."""
    return size_guards(capture.guards, sizes)


class SizeSpecialisedRunner:
    """Runs a graph with symbolic sizes: lowers it for the sizes of each call, once per
    distinct size, and runs that. Call it through :attr:`call` (``runner.call(*inputs)``).

    With ``trace``, the autograd stage traces the symbolic graph once, at the first
    size without a cached autograd result (decision 0220), and each size lowers from
    that trace's result at its sizes (``lower(graph, aot)``: ``aot()`` gives it). Sizes
    that violate a condition the trace relied on get a symbolic trace of their own
    (``trace(graph, sizes)``), unless the condition is an equality (the trace
    specialised a size: another would too) or ``max_traces`` are made; a size no trace
    serves, whose lowering from a trace fails, or every size when there is no symbolic
    trace, lowers from the static graph alone (``lower(graph)``: aot, decomp and codegen
    per size).

    :param graph: the torch-level graph with symbolic sizes.
    :param lower: lowers a static torch-level graph to a runner (the pipeline's
        ``compile_graph(graph, options, aot).runner``).
    :param trace: the symbolic trace of a graph with symbolic sizes whose decisions on
        sizes are taken for the given sizes (None: the capture's), or None (the
        pipeline's ``trace_symbolic``).
    :param shared_from: the size of a trace from which on its sizes share its one
        decomposition (the compile option ``shared_decomposition_from``).
    :param lower_symbolic: makes the runner's :attr:`variants` (decision 0381): given
        the runner, lowers its graph once for every size that meets the conditions
        the lowering records. A new size tries those first and lowers on its own only
        where none serves it and a symbolic lowering fails (counted with its reason in
        ``size_lowering_stats()``).
    :param max_symbolic: lowerings for many sizes made (or failed) at most (the compile
        option ``symbolic_lowerings``, decision 0435).
    """

    def __init__(
        self,
        graph: Graph,
        lower: Callable[..., Callable[..., Any]],
        max_lowered: int = 64,
        trace: Callable[[Graph, Mapping[str, int] | None], SymbolicAot | None] | None = None,
        max_traces: int = 4,
        shared_from: int = SHARED_DECOMPOSITION_FROM,
        lower_symbolic: Callable[[SizeSpecialisedRunner], LowerSymbolic] | None = None,
        max_symbolic: int = SYMBOLIC_LOWERINGS,
    ) -> None:
        self.graph = graph
        self.lower = lower
        self.slots = input_symbol_slots(graph)
        self._slot_list = list(self.slots.values())
        self.runners: dict[tuple[int, ...], Callable[..., Any]] = {}
        #: sizes lowered at most; later sizes run the graph's torch ops (eager speed)
        self.max_lowered = max_lowered
        #: the symbolic traces (the first made at the first lowering; none: each size is
        #: traced on its own)
        self.traces: SymbolicTraces | None = None
        if trace is not None:
            self.traces = SymbolicTraces(lambda hints: trace(graph, hints), max_traces, shared_from)
        self._first = True
        #: the lowerings that serve many sizes (None: every size lowers on its own)
        self.variants = (
            SizeVariants(lower_symbolic(self), max_symbolic) if lower_symbolic is not None else None
        )
        #: the one way in: a generated function of the graph's inputs that builds the
        #: key of the call's sizes inline and runs the runner lowered for it (a lambda
        #: for the key and a method frame cost a tiny call 0.3 us, so the class has no
        #: ``__call__``); what the capture's program and a segment after a break call
        self.call: Callable[..., Any] = self._generate_call(len(graph.inputs))

    def _generate_call(self, arity: int) -> Callable[..., Any]:
        params = ", ".join(f"i{n}" for n in range(arity))
        key = "".join(f"i{p}.shape[{d}], " for p, d in self._slot_list)
        source = (
            f"def call({params}):\n"
            f"    key = ({key})\n"
            "    runner = get(key)\n"
            "    if runner is None:\n"
            "        runner = lower(key)\n"
            f"    return runner({params})\n"
        )
        namespace: dict[str, Any] = {"get": self.runners.get, "lower": self.runner_for}
        exec(compile(source, "<torchstrata size dispatch>", "exec"), namespace)
        call: Callable[..., Any] = namespace["call"]
        return call

    def runner_for(self, key: tuple[int, ...]) -> Callable[..., Any]:
        """The runner for the sizes ``key`` (the symbols' values in :attr:`slots` order),
        lowered on its first use."""
        runner = self.runners.get(key)
        if runner is None:
            runner = self.runners[key] = self._lower(key)
        return runner

    def _lower(self, key: tuple[int, ...]) -> Callable[..., Any]:
        values = dict(zip(self.slots, key, strict=True))
        if self.variants is not None:
            # the variants make the symbolic trace where they lower (symbolic_traces()):
            # one read from the compiled-graph cache needs none (decision 0450)
            made = self.variants.lowering_for(values)
            if made is not None:  # its first call here falls back (decision 0430)
                failed = functools.partial(self.variants.first_call_failed, values, made.runner)
                per_size = functools.partial(self._lower_per_size, values)
                return FirstCall(made.runner, key, self.runners, per_size, failed, made.writes)
        return self._lower_per_size(values)

    def _lower_per_size(self, values: dict[str, int]) -> Callable[..., Any]:
        graph = concretize_graph(self.graph, values)
        if len(self.runners) >= self.max_lowered:
            if len(self.runners) == self.max_lowered:
                logger.info(
                    "a symbolic graph met %d sizes: further sizes run its torch ops unlowered",
                    self.max_lowered,
                )
            return lambda *inputs: interpret(graph, *inputs)
        count("per_size")
        dynamic_log.debug("lowering the symbolic graph for sizes %s", values)
        try:
            if self.traces is None:
                return self.lower(graph)
            return lower_from_traces(self.lower, graph, lambda: self._traced_at(values), values)
        except Exception as error:  # noqa: BLE001 - a failed lowering runs eagerly, not wrongly
            logger.warning(
                "lowering the symbolic graph for sizes %s failed (%s: %s); interpreting it",
                values,
                type(error).__name__,
                error,
            )
            return lambda *inputs: interpret(graph, *inputs)

    def _traced_at(self, values: Mapping[str, int]) -> AotResult | SizedAot | None:
        """The result at ``values`` of a symbolic trace whose conditions they meet
        (:meth:`SymbolicTraces.at`; the first trace is made here, at the first
        lowering); None when this size is to be traced on its own."""
        self._first_trace()
        if self.traces is None:
            return None
        return self.traces.at(values)

    def symbolic_traces(self) -> SymbolicTraces | None:
        """The symbolic traces, the first made here at the first call (None: there is
        no symbolic trace): what the lowerings for many sizes lower from."""
        self._first_trace()
        return self.traces

    def _first_trace(self) -> None:
        """Make the first symbolic trace (once; none: :attr:`traces` becomes None)."""
        if self._first and self.traces is not None:
            self._first = False
            self.traces.add(None)
            if not self.traces.traces:
                self.traces = None  # no symbolic trace: every size is traced on its own


def refused_before_capture(
    pipeline: Any,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    options: CompileOptions,
) -> str:
    """Why the frame cannot compile symbolic, where that shows before capture: ''
    when it may (:func:`eligible` decides after capture)."""
    from torchstrata.runtime.pipeline import Pipeline

    if type(pipeline) is not Pipeline:  # distributed region pipelines and the like
        return f"only the plain Pipeline is symbolic-capable yet, not {type(pipeline).__name__}"
    tensors = [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)]
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.nn.Module):
        tensors += list(owner.parameters())
    devices = {t.device.type for t in tensors}
    return _device_refusal(devices) if devices - set(SYMBOLIC_DEVICES) else ""


def compile_symbolic(
    pipeline: Any,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    options: CompileOptions,
    plan: Mapping[str, Sequence[int]],
) -> Any:
    """Capture ``fn`` with the dimensions of ``plan`` symbolic and build its
    :class:`~torchstrata.runtime.pipeline.FrameArtifacts` (guards from
    :func:`symbolic_guards`, the graph run by a :class:`SizeSpecialisedRunner`); None
    when the frame is not symbolic-capable, after one log line saying why (the caller
    compiles it static)."""

    from torchstrata.core import dynamo_import_deferred, symbolic_scope
    from torchstrata.runtime.compile_trace import compile_trace, function_title
    from torchstrata.runtime.symbolic_lowering import runner_lowerer

    refused = refused_before_capture(pipeline, fn, args, kwargs, options)
    if refused:  # known without capturing: no capture spent on it
        logger.info("compiling %s static per shape: %s", function_title(fn), refused)
        return None
    sizes = SymbolicSizes(plan)
    capture = None
    try:
        with dynamo_import_deferred(), compile_trace(function_title(fn), options):
            with symbolic_scope(sizes):
                capture = pipeline.capture(fn, args, kwargs, options)
            if capture is None:
                return None
            eligible(capture, options)
    except SymbolicRefused as refused:
        logger.info("compiling %s static per shape: %s", function_title(fn), refused)
        dynamic_log.debug("symbolic compile refused: %s", refused)
        static = capture is not None and not any(map(graph_has_symbols, capture.graphs))
        if static and not capture.graph_breaks and capture.program is not None:  # type: ignore[union-attr]
            # no symbol made it into the graph (a capture plugin that ignores the
            # symbolic scope, or every symbolic size was specialised): a static capture
            return pipeline.compile_frame(fn, args, kwargs, options, captured=capture)
        return None
    except Exception as error:  # noqa: BLE001 - symbolic capture is optional: fall back
        logger.info(
            "compiling %s static per shape: symbolic capture failed (%s: %s)",
            function_title(fn),
            type(error).__name__,
            error,
        )
        return None

    def lower(graph: Graph, aot: AotSource | None = None) -> Callable[..., Any]:
        with dynamo_import_deferred():
            return pipeline.compile_graph(graph, options, aot).runner

    def trace(graph: Graph, hints: Mapping[str, int] | None) -> SymbolicAot | None:
        with dynamo_import_deferred():
            return pipeline.trace_symbolic(graph, options, hints)

    runner = SizeSpecialisedRunner(
        capture.graphs[0],
        lower,
        trace=trace,
        shared_from=options.shared_decomposition_from,
        lower_symbolic=runner_lowerer(pipeline, options) if options.symbolic_lowering else None,
        max_symbolic=options.symbolic_lowerings,
    )
    guarded = attrs.evolve(capture, guards=symbolic_guards(capture, sizes))
    # a frame with graph breaks is traced more than once: the first symbol of each dim
    first: dict[tuple[str, int], str] = {}
    for binding in sizes.bindings:
        first.setdefault((binding.source, binding.dim), binding.name)
    dims = ", ".join(
        f"{readable_source(f'{source}.size()[{dim}]')} as {name}"
        for (source, dim), name in first.items()
    )
    logger.info("compiling %s with symbolic sizes: %s", function_title(fn), dims)
    dynamic_log.debug("symbolic graph of %s:\n%s", function_title(fn), capture.graphs[0])
    program = guarded.program
    assert program is not None  # eligible() checked
    run = functools.partial(program, [runner.call])
    direct = guarded.direct_program
    run_inputs = functools.partial(direct, [runner.call]) if direct is not None else None
    routes = None
    if direct is not None and guarded.direct_sources is not None:
        try:
            routes = SizeRoutes(
                guarded.guards[-1],
                guarded.direct_sources,
                list(runner.slots.values()),
                runner.runner_for,
                direct,
            )
        except ValueError as error:
            dynamic_log.debug("calls routed by the size dispatch, not the guard: %s", error)
    return FrameArtifacts(guarded, (), run, run_inputs=run_inputs, routes=routes)
