"""``compile()`` of a module sharded with FSDP2 (``fully_shard``).

An FSDP unit all-gathers its parameters in a forward pre-hook and frees them in a
forward hook, and registers its backward hooks there too. Those hooks are graph
boundaries here: they run eagerly, as PyTorch's own code, and what runs between them,
the unit's ``forward``, is compiled. A unit's ``forward`` that calls other units (the
root, which holds the blocks) is not compiled as one graph (its calls would run hooks
in the middle of it); its submodules are compiled instead, each unit on its own, and the
glue between them (a loop over blocks) runs eagerly. ``CheckpointWrapper`` modules are
glue too: the module they wrap is compiled, so a checkpoint's recomputation in the
backward reaches the same compiled code. See docs/decisions/0131.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from torchstrata.core import CompileOptions
from torchstrata.runtime.compiled import CompiledFunction, CompiledModule
from torchstrata.runtime.distributed.install import install_compiled_forward, original_forward
from torchstrata.runtime.distributed.region_pipeline import RegionPipeline
from torchstrata.runtime.pipeline import Pipeline


def _fsdp_module_type() -> type | None:
    """``FSDPModule``, if FSDP2 was imported (no module can be a unit otherwise: an
    import here would cost every ``compile()`` the import of torch.distributed.fsdp)."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    module_type = getattr(fsdp, "FSDPModule", None)  # torch >= 2.6
    return module_type if isinstance(module_type, type) else None


def _checkpoint_wrapper_type() -> type | None:
    if not torch.distributed.is_available():
        return None
    try:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            ActivationWrapper,
        )
    except ImportError:
        return None
    return ActivationWrapper


def is_fsdp(module: Any) -> bool:
    """Whether ``module`` or a submodule of it is sharded with ``fully_shard``."""
    fsdp_type = _fsdp_module_type()
    if fsdp_type is None or not isinstance(module, torch.nn.Module):
        return False
    return any(isinstance(m, fsdp_type) for m in module.modules())


def _has_own_forward(module: torch.nn.Module) -> bool:
    """Containers (``ModuleList``, ``ModuleDict``) have no forward of their own."""
    return type(module).forward is not torch.nn.Module.forward


def compiled_regions(root: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules whose ``forward`` is compiled, outermost first: a module whose strict
    submodules include no FSDP unit (so nothing inside it runs FSDP hooks), unless it is
    a checkpoint wrapper; else each of its children, by the same rule."""
    fsdp_type = _fsdp_module_type()
    wrapper_type = _checkpoint_wrapper_type()
    regions: list[torch.nn.Module] = []

    def visit(module: torch.nn.Module) -> None:
        holds_units = fsdp_type is not None and any(
            isinstance(m, fsdp_type) for m in list(module.modules())[1:]
        )
        is_wrapper = wrapper_type is not None and isinstance(module, wrapper_type)
        if not holds_units and not is_wrapper and _has_own_forward(module):
            regions.append(module)
            return
        for child in module.children():
            visit(child)

    visit(root)
    return regions


class CompiledFSDP(CompiledModule):
    """What ``compile()`` returns for a module sharded with FSDP2: calls run the module
    itself (its hooks and glue eagerly); each region of :func:`compiled_regions` runs
    its compiled forward (``regions`` maps each to its :class:`CompiledFunction`).

    ``compiled_forward`` is the root's region when the root is one; else the root's
    forward for :func:`~torchstrata.runtime.explain` only (never run), whose report then
    says why the root is not one graph (its calls of FSDP units, which have hooks). To
    explain a unit, call ``explain(unit.forward, *args)`` between its hooks (from a
    forward pre-hook registered after FSDP's).
    """

    def __init__(
        self,
        module: torch.nn.Module,
        regions: dict[torch.nn.Module, CompiledFunction],
        root_forward: CompiledFunction,
    ) -> None:
        super().__init__(module, root_forward)
        self.__dict__["regions"] = regions  # not a submodule dict entry

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the sharded module (its regions run compiled)."""
        return self._orig_mod(*args, **kwargs)


def compile_fsdp(
    root: torch.nn.Module, options: CompileOptions, pipeline: Pipeline
) -> CompiledFSDP:
    """Install a compiled forward on every region of ``root`` (see the module
    docstring) and return ``root`` wrapped as a :class:`CompiledFSDP`."""
    region_pipeline = RegionPipeline(pipeline)
    regions = {
        module: install_compiled_forward(module, options, region_pipeline)
        for module in compiled_regions(root)
    }
    if not regions:
        raise ValueError(f"{type(root).__name__}: no module with a forward to compile")
    root_forward = regions.get(root) or CompiledFunction(
        original_forward(root), options, region_pipeline
    )
    return CompiledFSDP(root, regions, root_forward)
