"""The ``torchstrata_codegen`` hook of the inductor stage: a thin adapter over :func:`compile_graph`."""

from __future__ import annotations

import torch

from torchstrata.core import CompiledGraph, CompileOptions, Graph, hookimpl
from torchstrata.inductor.compile import compile_graph


@hookimpl
def torchstrata_codegen(
    graph: Graph, device: torch.device, options: CompileOptions
) -> CompiledGraph | None:
    """Compile a prims graph to fused kernels; None when ``options.codegen == "eager"``."""
    if options.codegen == "eager":
        return None
    return compile_graph(graph, device, options)
