"""The ``torchstrata_aot`` hook of the autograd stage: a thin adapter over :func:`aot`."""

from __future__ import annotations

from torchstrata.autograd.aot import aot
from torchstrata.core import AotResult, CompileOptions, Graph, hookimpl


@hookimpl
def torchstrata_aot(graph: Graph, options: CompileOptions) -> AotResult | None:
    """Trace ``graph`` into functional ATen forward (and, for training, backward) graphs."""
    return aot(graph, options)
