"""Compiled forwards installed on modules that PyTorch's distributed engines call.

DDP and FSDP2 call the modules they wrap themselves (``self.module(*inputs)``, an FSDP
unit's ``__call__`` between its hooks, a checkpoint's recomputation in the backward), so
the compiled code must be what those calls reach. ``nn.Module.__call__`` runs the
module's hooks around ``self.forward``: a compiled function set as the instance's
``forward`` runs between them, as ``nn.Module.compile()`` puts torch.compile there.
"""

from __future__ import annotations

from typing import Any

import torch

from torchstrata.core import CompileOptions
from torchstrata.runtime.compiled import CompiledFunction
from torchstrata.runtime.pipeline import Pipeline


def original_forward(module: torch.nn.Module) -> Any:
    """``module``'s class ``forward`` bound to it (what runs without torchstrata)."""
    return type(module).forward.__get__(module)


def install_compiled_forward(
    module: torch.nn.Module, options: CompileOptions, pipeline: Pipeline
) -> CompiledFunction:
    """Compile ``module``'s class ``forward`` and set it as the instance's ``forward``
    (replacing one installed before). Returns the compiled function."""
    compiled = CompiledFunction(original_forward(module), options, pipeline)
    module.forward = compiled
    return compiled


def installed_forward(module: torch.nn.Module) -> CompiledFunction | None:
    """The compiled forward installed on ``module`` (None: none)."""
    forward = module.__dict__.get("forward")
    return forward if isinstance(forward, CompiledFunction) else None


def uninstall(root: torch.nn.Module) -> int:
    """Remove every compiled forward installed on ``root`` and its submodules; returns
    how many there were. The modules run their class ``forward`` again."""
    removed = 0
    for module in root.modules():
        if installed_forward(module) is not None:
            del module.__dict__["forward"]
            removed += 1
    return removed
