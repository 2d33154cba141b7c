"""torchstrata.runtime: ``compile()``, ``explain()``, ``reset()``, ``set_logs()``, guards,
caches, eager fallback and the Dynamo backend."""

from torchstrata.core.logs import set_logs
from torchstrata.runtime.api import compile, explain, reset
from torchstrata.runtime.compiled import CompiledFunction, CompiledModule
from torchstrata.runtime.dynamic_shapes import mark_dynamic, mark_static
from torchstrata.runtime.dynamo_explain import explain_dynamo
from torchstrata.runtime.dynamo_options import BackendOptionError
from torchstrata.runtime.errors import (
    CompilationError,
    TorchstrataFallbackWarning,
    TorchstrataOptionWarning,
)
from torchstrata.runtime.explain import ExplainReport
from torchstrata.runtime.frames import bind_frame
from torchstrata.runtime.graph_cache import GraphCacheStats, graph_cache_stats
from torchstrata.runtime.graph_cache import suspended as graph_cache_suspended
from torchstrata.runtime.guards import GuardFailure, GuardSet
from torchstrata.runtime.pipeline import Pipeline
from torchstrata.runtime.size_variants import reset_size_lowering_stats, size_lowering_stats

__all__ = [
    "BackendOptionError",
    "CompilationError",
    "CompiledFunction",
    "CompiledModule",
    "ExplainReport",
    "GraphCacheStats",
    "GuardFailure",
    "GuardSet",
    "Pipeline",
    "TorchstrataFallbackWarning",
    "TorchstrataOptionWarning",
    "bind_frame",
    "compile",
    "explain",
    "explain_dynamo",
    "graph_cache_stats",
    "graph_cache_suspended",
    "mark_dynamic",
    "mark_static",
    "reset",
    "reset_size_lowering_stats",
    "set_logs",
    "size_lowering_stats",
]
