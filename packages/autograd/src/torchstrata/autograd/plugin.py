"""The ``torchstrata_aot`` hook of the autograd stage: a thin adapter over :func:`aot`."""

from __future__ import annotations

from collections.abc import Mapping

from torchstrata.autograd.aot import aot
from torchstrata.autograd.symbolic import aot_symbolic
from torchstrata.core import AotResult, CompileOptions, Graph, SymbolicAot, hookimpl


@hookimpl
def torchstrata_aot(graph: Graph, options: CompileOptions) -> AotResult | None:
    """Trace ``graph`` into functional ATen forward (and, for training, backward) graphs."""
    return aot(graph, options)


@hookimpl
def torchstrata_aot_symbolic(
    graph: Graph, options: CompileOptions, hints: Mapping[str, int] | None
) -> SymbolicAot | None:
    """Trace ``graph``, whose sizes are symbolic, once for every size."""
    return aot_symbolic(graph, options, hints)
