"""Lowerings made once for many sizes in the compiled-graph cache (issue 33, decision 0450).

A symbolic entry's lowering (:mod:`.symbolic_lowering`, decisions 0381/0395) is stored as
a ``symbolic`` entry of the compiled-graph cache (:mod:`.graph_cache`), so that a fresh
process serves the sizes it holds for with no autograd trace, decomposition or code
generation. The entry is keyed like the others (:mod:`.graph_cache_key`: the graph's
text with its symbolic sizes and ``requires_grad``, the options, this installation, the
CUDA devices), and also by grad mode, autocast and the default dtype. It holds, per
lowering (at most ``symbolic_lowerings``):

- ``conditions``: every condition on sizes the lowering relied on: the symbolic trace's,
  the symbolic decomposition's and those the codegen recorded (``SizeGuards``), as sympy
  text (:mod:`.symbolic_records`). A size that does not meet all of them is not served
  by it: it is lowered as without the cache (symbolically again, or per size);
- ``forward`` (and ``backward``): the codegen stage's packages of the sized graphs (C++
  kernels by source, their libraries from the kernel cache; Triton modules and launch
  choices), loaded through ``torchstrata_codegen_load``;
- the runner's recipe: the autograd result at the lowering's sizes (its counts and the
  inputs it writes back), whether the forward runs with grad off, the device types it
  runs with autocast off for and the symbolic layouts of outputs that alias inputs or
  each other (:class:`~.symbolic_outputs.ViewLayouts`; both decision 0505), and for
  training the metadata the runner computes from each call's sizes
  (:class:`~.symbolic_training.TrainingMetas`, as expressions).

What is stored is what the lowering holds (the graphs it compiled,
``SymbolicLowering.compiled``) and what was noted while it was made
(:mod:`.symbolic_recording` around ``lower(values)``: the trace and conditions, a training
runner's metadata, its outputs' view layouts, each where it is made), not worked out by a
second code path.
Lowerings whose runner carries more than this recipe are not stored
(:class:`~.graph_records.NotCacheable`, logged with its reason): lifted tensor constants,
a CUDA graph mode's per-size graphs, a size expression that does not read back from its
text. Write-backs (an inference forward's, decision 0497; a training runner's), output
views and aliases and autocast (decision 0505) are part of the recipe. A
stored training lowering's backward that raises at a size's first backward falls back
to the ATen backward of the entry's symbolic trace, made then, where that trace's
partition at the stored lowering's sizes is the stored one (decision 0485). An entry
that does not decode or load is removed with a
:class:`~torchstrata.core.artifacts.CacheWarning` and the lowering is made again; the
cache never fails a compile (:func:`~.graph_cache._never_fatal`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pluggy
import torch

from torchstrata.core import (
    CompiledGraph,
    CompileOptions,
    Graph,
    SizeGuards,
    enabled_autocast,
    input_symbol_slots,
)
from torchstrata.core.size_values import conditions_check
from torchstrata.runtime import graph_cache
from torchstrata.runtime.autocast_off import without_autocast
from torchstrata.runtime.cuda_graphs import CUDA_GRAPH_MODES
from torchstrata.runtime.graph_cache import _STATS, _never_fatal, _note
from torchstrata.runtime.graph_records import BadRecord, NotCacheable, aot_record, read_aot
from torchstrata.runtime.inference import grad_off
from torchstrata.runtime.runners import inference_runner
from torchstrata.runtime.size_variants import LowerSymbolic, SymbolicLowering
from torchstrata.runtime.symbolic_backward import EagerBackward
from torchstrata.runtime.symbolic_outputs import SizedOutputs, sized_outputs
from torchstrata.runtime.symbolic_recording import Recording, recording
from torchstrata.runtime.symbolic_records import (
    expression_text,
    metas_record,
    package_record,
    read_expression,
    read_metas,
    read_view_layouts,
    view_layouts_record,
)
from torchstrata.runtime.symbolic_traces import SymbolicTraces
from torchstrata.runtime.symbolic_training import TrainingMetas, sized_training_runner

KIND = "symbolic"


def cached_lowerer(
    lower: LowerSymbolic,
    graph: Graph,
    options: CompileOptions,
    manager: Callable[[], pluggy.PluginManager] | None,
    traces: Callable[[], SymbolicTraces | None] | None = None,
) -> LowerSymbolic:
    """``lower``, reading a lowering that serves the sizes from the compiled-graph cache
    first and storing each one it makes (its graphs, ``SymbolicLowering.compiled``, and
    what :mod:`.symbolic_recording` noted while it was made).
    ``graph``: the torch-level graph with symbolic sizes; ``manager``: the plugin
    manager (None: no cache); ``traces``: the entry's symbolic traces (made on first
    use), which a stored lowering's backward falls back from (decision 0485). A CUDA graph
    mode's lowerings are not stored: their runner records a graph per size over the
    forward (decision 0456), which a stored recipe does not rebuild."""
    if manager is None:
        return lower
    if options.mode in CUDA_GRAPH_MODES:
        graph_cache.cache_log.debug(
            "graph cache: lowerings for many sizes under mode=%r are not stored: their "
            "runner records a CUDA graph per size",
            options.mode,
        )
        return lower
    entries = SymbolicEntries(graph, options, manager, traces)

    def cached(values: Mapping[str, int]) -> SymbolicLowering:
        found = entries.lookup(values)
        if found is not None:
            return found
        with recording() as recorded:
            made = lower(values)
        entries.store(values, made, recorded)
        return made

    return cached


class SymbolicEntries:
    """The ``symbolic`` cache entry of one torch-level graph with symbolic sizes."""

    def __init__(
        self,
        graph: Graph,
        options: CompileOptions,
        manager: Callable[[], pluggy.PluginManager],
        traces: Callable[[], SymbolicTraces | None] | None = None,
    ) -> None:
        self.graph = graph
        self.traces = traces
        self.options = options
        self.manager = manager
        self.slots = input_symbol_slots(graph)
        self._training = any(meta.requires_grad for meta in graph.input_metas)

    def key(self) -> str | None:
        """The entry's key under the global state now (None: the cache is off, or the
        graph has no text form)."""
        state = (
            f"\0grad={torch.is_grad_enabled()} autocast={enabled_autocast()} "
            f"default_dtype={torch.get_default_dtype()}"
        )
        return graph_cache._key(KIND, self.graph, self.options, self.manager(), state, hints=False)

    @_never_fatal(None)
    def lookup(self, values: Mapping[str, int]) -> SymbolicLowering | None:
        """A stored lowering whose conditions ``values`` meet, loaded; None: none."""
        key = self.key()
        if key is None:
            return None
        document = graph_cache._read(self.options, key, KIND)
        if document is not None:
            try:
                found = self._serving(document, values)
            except Exception as error:  # noqa: BLE001 - any part that does not make a lowering
                reason = str(error) if isinstance(error, BadRecord) else _reason(error)
                graph_cache._discard(graph_cache._store(self.options), key, reason)
                found = None
            if found is not None:
                _STATS.hits += 1
                _note("hit", "lowering for many sizes", key)
                return found
        _STATS.misses += 1
        _note("miss", "lowering for many sizes", key)
        return None

    def _serving(
        self, document: Mapping[str, Any], values: Mapping[str, int]
    ) -> SymbolicLowering | None:
        variants = document["variants"]
        if not isinstance(variants, list):
            raise BadRecord("the lowerings of a symbolic entry are no list")
        for variant in variants:
            conditions = tuple(map(read_expression, variant["conditions"]))
            serves = _serves(conditions)
            if serves(values):
                runner, writes = self._runner(variant)
                text = tuple(map(str, conditions))
                return SymbolicLowering(runner, serves, text, writes=writes, from_cache=True)
        return None

    def _runner(self, variant: Mapping[str, Any]) -> tuple[Callable[..., Any], tuple[int, ...]]:
        """The runner of a stored lowering (its packages loaded, its recipe followed as
        :func:`~.symbolic_lowering.symbolic_lowerer` follows it), and the positions of
        the inputs it writes (write-backs, decisions 0497 and 0505)."""
        device = torch.device(variant["device"])
        aot = read_aot(variant["aot"])
        writes = tuple(aot.mutated_inputs)
        if any(not 0 <= i < len(self.graph.inputs) for i in writes):
            raise BadRecord("a stored lowering writes an input the graph does not have")
        outputs_at = self._outputs_at(variant, aot)
        devices = self._autocast_devices(variant)
        forward = self._load(variant["forward"], device)
        if variant["backward"] is None:
            runner = inference_runner(forward, aot, outputs_at)
            runner = grad_off(runner) if variant["grad_off"] else runner
        else:
            runner = self._training_runner(variant, aot, forward, device, outputs_at)
        return (without_autocast(runner, devices) if devices else runner), writes

    def _outputs_at(self, variant: Mapping[str, Any], aot: Any) -> SizedOutputs | None:
        """The output aliases and views of a stored lowering at each call's sizes, from
        its stored symbolic layouts, checked to give the stored partition's at the
        stored sizes (decision 0505)."""
        record = variant["outputs"]
        hints = variant["hints"]
        if not isinstance(hints, dict) or any(type(v) is not int for v in hints.values()):
            raise BadRecord("a stored lowering's sizes are no mapping of ints")
        layouts = None if record is None else read_view_layouts(record)
        if layouts is None:
            made = (*(aot.output_aliases or ()), *(aot.output_views or ()))
            if any(view is not None for view in made):
                raise BadRecord("a stored lowering with output views but no layouts of them")
            return None
        try:
            return sized_outputs(self.slots, aot, aot, hints, layouts)
        except NotImplementedError as error:
            raise BadRecord(f"its output layouts are not its partition's: {error}") from error

    @staticmethod
    def _autocast_devices(variant: Mapping[str, Any]) -> tuple[str, ...]:
        """The device types a stored lowering runs with autocast off for: those autocast
        is on for now (the key holds the autocast state, decision 0505)."""
        devices = tuple(device for device, _ in enabled_autocast())
        if variant["autocast"] != list(devices):
            raise BadRecord("a stored lowering made under another autocast state")
        return devices

    def _training_runner(
        self,
        variant: Mapping[str, Any],
        aot: Any,
        forward: CompiledGraph,
        device: torch.device,
        outputs_at: SizedOutputs | None,
    ) -> Callable[..., Any]:
        backward = self._load(variant["backward"], device)
        hints = variant["hints"]
        if set(hints) != set(self.slots):
            raise BadRecord("a stored lowering's sizes are not the graph's symbols")
        guards = SizeGuards(hints)
        layouts = variant["layouts"]
        try:
            with guards.active():
                metas = TrainingMetas(
                    read_metas(layouts["outputs"], guards),
                    read_metas(layouts["saved"], guards),
                    tuple(map(str, layouts["carried"])),
                    device if layouts["carried"] else None,  # the carrier's (0440)
                )
                eager = self._aten_backward(variant["aot"], hints)
                runner = sized_training_runner(
                    aot, forward, backward, self.slots, metas, outputs_at, eager
                )
            if guards.refused:
                raise BadRecord(f"a stored lowering's layouts read a size: {guards.refused[0]}")
        finally:
            guards.close()
        return runner

    def _aten_backward(self, stored: Any, hints: Mapping[str, int]) -> EagerBackward | None:
        """The ATen backward at given sizes that a stored lowering's backward falls back
        to (decision 0485): the entry's symbolic trace's (made at the first fallback: a
        cache hit traced nothing), only where that trace serves the sizes and ``hints``
        (the stored lowering's) and its AOT record at ``hints`` is ``stored``: the same
        partition, the same saved values. Otherwise None (the backward raises with its
        note); None without traces."""
        traces = self.traces
        if traces is None:
            return None

        def at(values: Mapping[str, int]) -> Graph | None:
            with torch.enable_grad():  # the backward runs with grad off: trace as the forward
                made = traces()
            found = None if made is None else made.trace_for(values)
            if found is None or found[0].violated(hints):
                return None
            traced = found[0]
            again = json.loads(json.dumps(aot_record(traced.at(hints), constants=False)))
            return traced.at(values).backward if again == stored else None

        return at

    def _load(self, package: Any, device: torch.device) -> CompiledGraph:
        if not isinstance(package, dict):
            raise BadRecord("a stored lowering's package is no JSON object")
        try:
            compiled = self.manager().hook.torchstrata_codegen_load(
                package=package, device=device, options=self.options
            )
        except Exception as error:
            raise BadRecord(
                f"its package does not load: {type(error).__name__}: {error}"
            ) from error
        if not isinstance(compiled, CompiledGraph):
            raise BadRecord("no codegen plugin loads its package")
        return compiled

    @_never_fatal(None)
    def store(
        self, values: Mapping[str, int], made: SymbolicLowering, recording: Recording
    ) -> None:
        """Add the lowering ``made`` at ``values`` (what ``recording`` noted) to the
        entry: nothing where the cache is off or the lowering is not plain data."""
        key = self.key()
        if key is None or recording.traced is None or not made.serves(values):
            return
        try:
            variant = self._variant(values, made, recording)
        except NotCacheable as reason:
            _STATS.not_cacheable += 1
            graph_cache.cache_log.debug("graph cache: symbolic lowering not stored: %s", reason)
            return
        document = graph_cache._read(self.options, key, KIND)
        stored = list(document.get("variants", ())) if document is not None else []
        stored = [old for old in stored if old.get("conditions") != variant["conditions"]]
        stored = [*stored, variant][-max(1, self.options.symbolic_lowerings) :]
        graph_cache._write(self.options, key, KIND, "lowering for many sizes", {"variants": stored})

    def _variant(
        self, values: Mapping[str, int], made: SymbolicLowering, recording: Recording
    ) -> dict[str, Any]:
        traced = recording.traced
        assert traced is not None
        aot = traced.at(values)
        views = any(view is not None for view in getattr(aot, "output_views", ()) or ())
        aliases = any(alias is not None for alias in getattr(aot, "output_aliases", ()) or ())
        if (views or aliases) and recording.outputs is None:
            raise NotCacheable("output views or aliases not rebuilt from symbolic layouts")
        conditions = [expression_text(c) for c in (*traced.guards, *recording.relied)]
        compiled = made.compiled
        if len(compiled) not in (1, 2):
            raise NotCacheable(f"{len(compiled)} compiled graphs, not a forward (and backward)")
        first, *rest = compiled
        device, forward = first.device, first.compiled
        training = torch.is_grad_enabled() and self._training
        if rest and (recording.training is None or aot.backward is None):
            raise NotCacheable("a forward and backward not made into a training runner here")
        if not rest and training and (aot.backward is not None or aot.tangent_outputs):
            raise NotCacheable("a training graph lowered without its backward")
        variant: dict[str, Any] = {
            "hints": dict(values),
            "conditions": conditions,
            "device": str(device),
            # a constant made from a size would hold the value at these sizes only
            "aot": aot_record(aot, constants=False),
            "forward": package_record(forward.package),
            "backward": None,
            # one graph of a graph that requires grad: no output carries a gradient
            "grad_off": not rest and training,
            "layouts": None,
            "outputs": None if not (views or aliases) else view_layouts_record(recording.outputs),
            # the runner runs with autocast off for these (the capture wrote the casts)
            "autocast": [device for device, _ in enabled_autocast()],
        }
        if rest:
            (backward,) = rest
            metas: TrainingMetas = recording.training
            variant["backward"] = package_record(backward.compiled.package)
            variant["layouts"] = {
                "outputs": metas_record(metas.outputs),
                "saved": metas_record(metas.saved),
                "carried": list(metas.carried),
            }
        return variant


def _reason(error: Exception) -> str:
    return f"it does not make a lowering: {type(error).__name__}: {error}"


def _serves(conditions: tuple[Any, ...]) -> Callable[[Mapping[str, int]], bool]:
    """Whether sizes meet every one of ``conditions`` (False where one names a symbol
    the sizes give no value for)."""
    holds = conditions_check(conditions)

    def serves(values: Mapping[str, int]) -> bool:
        try:
            return bool(holds(values))
        except KeyError:
            return False

    return serves
