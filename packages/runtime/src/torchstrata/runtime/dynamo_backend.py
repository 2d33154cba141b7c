"""``torch.compile(model, backend="torchstrata")``: Dynamo's capture, our later stages.

Declared as entry point ``torchstrata`` in group ``torch_dynamo_backends``. Imports
nothing from ``torch._dynamo``: the FX graph Dynamo hands over is converted with
:func:`torchstrata.core.from_fx` and sent through the aot/decomp/codegen hooks.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from torchstrata.core import current_options, enabled_autocast, from_fx
from torchstrata.runtime.errors import TorchstrataFallbackWarning
from torchstrata.runtime.pipeline import Pipeline

_PIPELINE = Pipeline()


def _output_structure(gm: torch.fx.GraphModule) -> type | None:
    """list/tuple when the FX graph returns a sequence, None for a single value."""
    for node in gm.graph.nodes:
        if node.op == "output":
            value = node.args[0]
            return type(value) if isinstance(value, list | tuple) else None
    return tuple


def _needs_autograd(args: Sequence[Any]) -> bool:
    return torch.is_grad_enabled() and any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args
    )


def torchstrata_backend(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **_: Any
) -> Callable[..., Any]:
    """Compile a Dynamo FX graph with the installed torchstrata stages.

    Falls back to ``gm.forward`` (with a :class:`TorchstrataFallbackWarning`) when the
    graph cannot be converted or a stage fails; calls whose inputs need autograd
    history also run ``gm.forward`` until backward graphs are wired.
    """
    options = current_options()
    if enabled_autocast():
        # Dynamo's graph holds no autocast casts (our capture writes them; this graph is
        # not ours): run it under the caller's autocast. Dynamo guards autocast, so a
        # call without it compiles anew.
        warnings.warn(
            "torchstrata dynamo backend: autocast is enabled and Dynamo's graph holds no "
            "autocast casts; running the FX graph eagerly",
            TorchstrataFallbackWarning,
            stacklevel=2,
        )
        return gm.forward
    try:
        graph = from_fx(gm, list(example_inputs))
        artifacts = _PIPELINE.compile_graph(graph, options)
    except Exception as error:  # noqa: BLE001 - any failure falls back to the FX graph
        warnings.warn(
            f"torchstrata dynamo backend: {type(error).__name__}: {error}; running the "
            "FX graph eagerly",
            TorchstrataFallbackWarning,
            stacklevel=2,
        )
        return gm.forward
    structure = _output_structure(gm)
    runner = artifacts.runner

    def compiled(*args: Any) -> Any:
        if _needs_autograd(args):
            return gm.forward(*args)
        results = runner(*args)
        if structure is None:
            return results[0]
        return structure(results)

    return compiled
