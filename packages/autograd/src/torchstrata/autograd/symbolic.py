"""``aot_symbolic``: one trace of a graph with symbolic sizes for every size (decision
0220).

The joint forward/backward trace (the autograd stage's costliest step) runs once, on
fake tensors whose sizes are symbols. What depends on concrete sizes runs per size on
the trace made static: the softmax spelling, factored sums, the min-cut partition
(whose costs are byte counts), unit gradients and the offset check.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from torchstrata.autograd.aot import aot_from_trace
from torchstrata.autograd.trace import JointTrace, trace_symbolic
from torchstrata.core import (
    AotResult,
    CompileOptions,
    Graph,
    SymbolicAot,
    concretize,
    concretize_graph,
    graph_symbols,
    symbol_hints,
)


def aot_symbolic(
    graph: Graph, options: CompileOptions | None = None, hints: Mapping[str, int] | None = None
) -> SymbolicAot:
    """Trace ``graph`` (torch level, sizes symbolic) once; the result's ``at(sizes)``
    is :func:`~torchstrata.autograd.aot` of ``graph`` made static at those sizes. Where
    the trace decides on a size, it decides for ``hints`` (symbol name -> size; default:
    the sizes the capture saw).

    :raises NotImplementedError: if the trace made a size no input gives (a
        data-dependent size), or for what :func:`~torchstrata.autograd.aot` refuses.
    :raises ValueError: if a symbol of ``graph`` is not the size of an input dimension.
    """
    training = any(node.tensor_meta.requires_grad for node in graph.inputs)
    trace, guards = trace_symbolic(graph, training=training, hints=hints)
    unknown = graph_symbols(trace.graph) - set(symbol_hints(graph))
    if unknown:
        raise NotImplementedError(f"the trace made sizes no input gives: {sorted(unknown)}")

    def specialise(values: Mapping[str, int]) -> AotResult:
        return aot_from_trace(concretize_trace(trace, values), options)

    return SymbolicAot(trace.graph, guards, specialise)


def concretize_trace(trace: JointTrace, values: Mapping[str, int]) -> JointTrace:
    """``trace`` with every symbolic size replaced by its value under ``values``."""
    return attrs.evolve(
        trace,
        graph=concretize_graph(trace.graph, values),
        output_aliases=concretize(trace.output_aliases, values),
        output_views=concretize(trace.output_views, values),
    )
