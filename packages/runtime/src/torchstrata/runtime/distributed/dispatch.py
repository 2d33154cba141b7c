"""Which modules ``compile()`` hands to the distributed wrappers."""

from __future__ import annotations

from typing import Any

from torchstrata.core import CompileOptions
from torchstrata.runtime.compiled import CompiledModule
from torchstrata.runtime.distributed.ddp import compile_ddp, is_ddp
from torchstrata.runtime.distributed.fsdp import compile_fsdp, is_fsdp
from torchstrata.runtime.pipeline import Pipeline


def compile_distributed(
    module: Any, options: CompileOptions, pipeline: Pipeline
) -> CompiledModule | None:
    """``module`` compiled for DDP or FSDP2 (in place: see :mod:`.install`), or None
    when it is neither."""
    if is_ddp(module):
        return compile_ddp(module, options, pipeline)
    if is_fsdp(module):
        return compile_fsdp(module, options, pipeline)
    return None
