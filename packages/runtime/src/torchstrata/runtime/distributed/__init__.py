"""Compiled modules under PyTorch's distributed engines: DDP (graphs split at gradient
buckets) and FSDP2 (each unit's forward compiled between its hooks)."""

from torchstrata.runtime.distributed.bucketed import BucketedPipeline, SplitArtifacts
from torchstrata.runtime.distributed.buckets import BucketCaps, bucket_cuts, bucket_layout
from torchstrata.runtime.distributed.ddp import CompiledDDP, compile_ddp, ddp_bucket_caps, is_ddp
from torchstrata.runtime.distributed.dispatch import compile_distributed
from torchstrata.runtime.distributed.fsdp import (
    CompiledFSDP,
    compile_fsdp,
    compiled_regions,
    is_fsdp,
)
from torchstrata.runtime.distributed.install import installed_forward, uninstall
from torchstrata.runtime.distributed.split import Piece, split_graph, valid_cuts

__all__ = [
    "BucketCaps",
    "BucketedPipeline",
    "CompiledDDP",
    "CompiledFSDP",
    "Piece",
    "SplitArtifacts",
    "bucket_cuts",
    "bucket_layout",
    "compile_ddp",
    "compile_distributed",
    "compile_fsdp",
    "compiled_regions",
    "ddp_bucket_caps",
    "installed_forward",
    "is_ddp",
    "is_fsdp",
    "split_graph",
    "uninstall",
    "valid_cuts",
]
