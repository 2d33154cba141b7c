"""The pipeline of compiled regions under DDP and FSDP2: the user's pipeline, plus a
warning when a region's graph breaks inside PyTorch's own code.

Such a break leaves the call that leads there to eager PyTorch (the graph ends before it
and resumes after it): right numbers, less compiled.
The common case is a reentrant ``torch.utils.checkpoint.checkpoint`` called inside a
compiled ``forward`` (the non-reentrant one is captured, decision 0134): capture stops
at it, so the checkpointed function runs eagerly. Passing ``use_reentrant=False``, or
wrapping the module with ``checkpoint_wrapper`` (a region boundary; the wrapped module's
forward is compiled, :mod:`.fsdp`), avoids the break.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pluggy
import torch

from torchstrata.core import CaptureResult, CompileOptions, Graph
from torchstrata.runtime.artifacts import AotSource, FrameArtifacts, GraphArtifacts
from torchstrata.runtime.compiled import describe
from torchstrata.runtime.fallback import warn_once
from torchstrata.runtime.pipeline import Pipeline

#: Graph breaks at files under this directory are inside PyTorch.
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _same(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def apart_from_saved_tensor_hooks() -> Any:
    """A context in which autograd saves tensors as they are, whatever saved-tensor hooks
    the caller installed (the innermost pair applies). A region first called inside a
    checkpoint (``checkpoint_wrapper``) is compiled under the checkpoint's hooks: the
    compiler's own traces on fake tensors would otherwise be packed by them, as if the
    region had saved them."""
    return torch.autograd.graph.saved_tensors_hooks(_same, _same)


class RegionPipeline(Pipeline):
    """Compiles like ``base`` (its plugin manager: stages, passes, blocked plugins);
    warns (:class:`TorchstrataFallbackWarning`, once per place) when a graph breaks in
    PyTorch's code.

    :param base: the pipeline ``compile()`` was given (or the default one).
    """

    def __init__(self, base: Pipeline) -> None:
        super().__init__()
        self.base = base

    def plugin_manager(self, options: CompileOptions) -> pluggy.PluginManager:
        """The base pipeline's manager."""
        return self.base.plugin_manager(options)

    def compile_frame(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: CompileOptions,
        captured: CaptureResult | None = None,
    ) -> FrameArtifacts:
        """As :meth:`Pipeline.compile_frame`, warning about breaks inside PyTorch."""
        with apart_from_saved_tensor_hooks():
            artifacts = super().compile_frame(fn, args, kwargs, options, captured)
        capture = artifacts.capture
        for graph_break in capture.graph_breaks if capture is not None else ():
            if graph_break.filename.startswith(TORCH_DIR):
                warn_once(
                    ("torch-graph-break", describe(fn), graph_break.filename, graph_break.lineno),
                    f"torchstrata: {describe(fn)} breaks its graph inside PyTorch "
                    f"({graph_break}); the call of {describe(fn)} that leads there runs eagerly "
                    "(its graph ends before that call and resumes after it). "
                    "A reentrant torch.utils.checkpoint.checkpoint inside a compiled forward "
                    "does this: pass use_reentrant=False (captured, recomputed in the "
                    "backward) or wrap the module with checkpoint_wrapper",
                    stacklevel=4,
                )
        return artifacts

    def compile_graph(
        self,
        graph: Graph,
        options: CompileOptions,
        aot: AotSource | None = None,
    ) -> GraphArtifacts:
        """As :meth:`Pipeline.compile_graph` (also for segments captured after a graph
        break, on their first run), apart from saved-tensor hooks."""
        with apart_from_saved_tensor_hooks():
            return super().compile_graph(graph, options, aot)
