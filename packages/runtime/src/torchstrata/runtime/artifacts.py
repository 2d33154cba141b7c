"""What the pipeline makes of a frame: each graph's artifacts, a lowered ATen graph and
the compiled call."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import attrs

from torchstrata.core import AotResult, CaptureResult, CompiledGraph, Graph, PassRecord
from torchstrata.runtime.cache import FrameRunner, InputsRunner
from torchstrata.runtime.runners import GraphFn, GraphRunner, LazyGraphFn
from torchstrata.runtime.size_routes import SizeRoutes
from torchstrata.runtime.symbolic_decomp import SharedDecomposition


@attrs.frozen
class SizedAot:
    """A symbolic trace's ``AotResult`` at one call's sizes (``values``, symbol name ->
    int), with the one decomposition of the trace's partitioned graphs that each size
    takes its prims graphs from (decision 0280)."""

    aot: AotResult
    values: Mapping[str, int]
    shared: SharedDecomposition


#: The ``aot`` argument of :meth:`Pipeline.compile_graph
#: <torchstrata.runtime.pipeline.Pipeline.compile_graph>` (and of the pipelines that
#: override it): asked where the graph cache has no autograd result for the graph, it
#: gives one (a symbolic trace's result at the graph's sizes, decision 0220, with its
#: shared decomposition where the trace was partitioned once: :class:`SizedAot`), or
#: None, which asks the autograd stage.
AotSource: TypeAlias = Callable[[], AotResult | SizedAot | None]


@attrs.frozen
class GraphArtifacts:
    """Everything made from one captured graph.

    ``torch_graph`` is after the ``post_capture`` passes; ``aten_graph`` the AOT
    forward after ``post_aot``; ``prims_graph`` after ``post_decomp``. A graph is None
    when the pipeline did not reach it. ``runner`` is what the program calls.
    """

    torch_graph: Graph
    aten_graph: Graph | None
    prims_graph: Graph | None
    aot: AotResult | None
    compiled: CompiledGraph | None
    runner: GraphRunner
    missing_stages: tuple[str, ...] = ()
    pass_records: tuple[PassRecord, ...] = ()
    interpreted: bool = False
    #: the backward, decomposed and compiled on its first call (None for inference)
    backward_fn: LazyGraphFn | None = None

    @property
    def backward_compiled(self) -> CompiledGraph | None:
        """The compiled backward graph (compiling it now if no backward ran yet)."""
        if self.backward_fn is None:
            return None
        fn = self.backward_fn.get()
        return fn if isinstance(fn, CompiledGraph) else None


@attrs.frozen
class Lowered:
    """One ATen graph after decomp and codegen: ``fn`` runs it (compiled, or in the
    interpreter when ``interpreted``)."""

    fn: GraphFn
    prims_graph: Graph | None = None
    compiled: CompiledGraph | None = None
    missing_stages: tuple[str, ...] = ()
    interpreted: bool = True

    @property
    def output_layouts(self) -> tuple[Any, ...]:
        """The metadata of each output as ``fn`` returns it: as the codegen reported
        (:attr:`CompiledGraph.output_layouts`), else as the prims graph says; empty when
        the graph was not decomposed."""
        if self.compiled is not None and self.compiled.output_layouts:
            return self.compiled.output_layouts
        if self.prims_graph is None:
            return ()
        return tuple(node.meta for node in self.prims_graph.outputs)


@attrs.frozen
class FrameArtifacts:
    """The compiled form of one call: ``run`` is None when it is to run eagerly
    (``eager_reason`` says why)."""

    capture: CaptureResult | None
    graphs: tuple[GraphArtifacts, ...]
    run: FrameRunner | None
    eager_reason: str = ""
    missing_stages: tuple[str, ...] = ()
    #: ``run`` from the values of ``capture.direct_sources`` (None: no such shortcut).
    run_inputs: InputsRunner | None = None
    #: a symbolic entry's routes by size, for its positional guard check (None: none)
    routes: SizeRoutes | None = None
