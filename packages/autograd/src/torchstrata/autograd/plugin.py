"""The ``torchstrata_aot`` hook of the autograd stage: a thin adapter over :func:`aot_forward`.

Graphs with inputs that require grad raise ``NotImplementedError`` (training needs the
AOT autograd issue); the runtime turns a stage exception into an eager fallback.
"""

from __future__ import annotations

from torchstrata.autograd.forward import aot_forward
from torchstrata.core import AotResult, CompileOptions, Graph, hookimpl


@hookimpl
def torchstrata_aot(graph: Graph, options: CompileOptions) -> AotResult | None:
    """Trace ``graph`` into a functional ATen forward graph (inference only for now)."""
    return aot_forward(graph, options)
