"""``aot_symbolic``: one trace of a graph with symbolic sizes for every size (decisions
0220, 0280).

The joint forward/backward trace (the autograd stage's costliest step) runs once, on
fake tensors whose sizes are symbols, and so does what follows it: the softmax spelling,
factored sums, the min-cut partition, unit gradients and the offset check run on the
symbolic joint graph in the trace's ``ShapeEnv``. The partition's byte costs read the
sizes' hints (the trace's sizes) and record no condition: saving a value or recomputing
it is a choice of speed, and every cut is right at every size. A decision of those steps
that is a matter of correctness (two shapes equal, a dim of size 1) compares ``SymInt``
values, which records its condition in the trace's guards like the trace's own. Per size
the partitioned graphs are only made static (:func:`concretize_aot`). Where the steps
fail on symbolic sizes, they run per size on the trace made static, as before (a debug
line says why).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from torchstrata.autograd.aot import aot_from_trace
from torchstrata.autograd.trace import JointTrace, trace_symbolic_sizes
from torchstrata.core import (
    AotResult,
    CompileOptions,
    Graph,
    SymbolicAot,
    artifact_logger,
    concretize,
    concretize_graph,
    graph_symbols,
    symbol_hints,
    symbolic_scope,
)

dynamic_log = artifact_logger(__name__, "dynamic")


def aot_symbolic(
    graph: Graph, options: CompileOptions | None = None, hints: Mapping[str, int] | None = None
) -> SymbolicAot:
    """Trace ``graph`` (torch level, sizes symbolic) once and partition it once; the
    result's ``at(sizes)`` is that partition made static at those sizes, which computes
    what :func:`~torchstrata.autograd.aot` of ``graph`` made static at those sizes
    computes (its cut taken for ``hints``, so what it saves may differ). Where the trace
    decides on a size, it decides for ``hints`` (symbol name -> size; default: the sizes
    the capture saw).

    :raises NotImplementedError: if the trace made a size no input gives (a
        data-dependent size), or for what :func:`~torchstrata.autograd.aot` refuses.
    :raises ValueError: if a symbol of ``graph`` is not the size of an input dimension.
    """
    training = any(node.tensor_meta.requires_grad for node in graph.inputs)
    trace, sizes = trace_symbolic_sizes(graph, training=training, hints=hints)
    unknown = graph_symbols(trace.graph) - set(symbol_hints(graph))
    if unknown:
        raise NotImplementedError(f"the trace made sizes no input gives: {sorted(unknown)}")
    try:
        with symbolic_scope(sizes):
            result = aot_from_trace(trace, options)
    except Exception as error:  # noqa: BLE001 - partitioned per size instead, as before 0280
        dynamic_log.debug(
            "the symbolic joint graph is partitioned per size: partitioning it failed (%s: %s)",
            type(error).__name__,
            error,
        )

        def per_size(values: Mapping[str, int]) -> AotResult:
            return aot_from_trace(concretize_trace(trace, values), options)

        # the failed attempt's conditions stay: one that specialised a size (``s0 -> 16``)
        # changed what the trace's sizes evaluate to, for every size but that one
        return SymbolicAot(trace.graph, sizes.guard_exprs(), per_size)

    def specialise(values: Mapping[str, int]) -> AotResult:
        return concretize_aot(result, values)

    return SymbolicAot(trace.graph, sizes.guard_exprs(), specialise, result=result)


def concretize_trace(trace: JointTrace, values: Mapping[str, int]) -> JointTrace:
    """``trace`` with every symbolic size replaced by its value under ``values``."""
    return attrs.evolve(
        trace,
        graph=concretize_graph(trace.graph, values),
        output_aliases=concretize(trace.output_aliases, values),
        output_views=concretize(trace.output_views, values),
    )


def concretize_aot(result: AotResult, values: Mapping[str, int]) -> AotResult:
    """``result`` (symbolic sizes) with every symbolic size replaced by its value under
    ``values``: its graphs as a static trace at those sizes would have partitioned them,
    had it cut where the symbolic partition did."""
    backward = result.backward
    return attrs.evolve(
        result,
        forward=concretize_graph(result.forward, values),
        backward=None if backward is None else concretize_graph(backward, values),
        output_aliases=concretize(result.output_aliases, values),
        output_views=concretize(result.output_views, values),
    )
