"""``compile()`` of a :class:`~torch.nn.parallel.DistributedDataParallel` module.

DDP's own ``forward`` (buffer broadcast, reducer preparation, unused-parameter search,
``no_sync``) stays eager and unchanged; the module it wraps gets a compiled ``forward``
whose training graphs are split at DDP's bucket boundaries (:mod:`.buckets`), so that
DDP's reducer hooks fire, and all-reduce a bucket, as soon as the backward of the piece
that reads the bucket's first parameter ends. See docs/decisions/0130.
"""

from __future__ import annotations

from typing import Any

import torch

from torchstrata.core import CompileOptions
from torchstrata.runtime.compiled import CompiledFunction, CompiledModule
from torchstrata.runtime.distributed.bucketed import BucketedPipeline
from torchstrata.runtime.distributed.buckets import BucketCaps
from torchstrata.runtime.distributed.install import install_compiled_forward
from torchstrata.runtime.pipeline import Pipeline

#: DDP's first bucket when the user sets no cap (``dist._DEFAULT_FIRST_BUCKET_BYTES``).
_FIRST_BUCKET_BYTES = 1024 * 1024


def is_ddp(module: Any) -> bool:
    """Whether ``module`` is a ``DistributedDataParallel``."""
    if not torch.distributed.is_available():
        return False
    return isinstance(module, torch.nn.parallel.DistributedDataParallel)


def ddp_bucket_caps(ddp: torch.nn.parallel.DistributedDataParallel) -> BucketCaps:
    """The caps DDP's reducer buckets gradients with once it has rebuilt its buckets
    after the first iteration (the layout of every later step)."""
    config = getattr(ddp, "_bucket_config", None)  # torch >= 2.13
    if config is not None:
        if config.per_bucket_bytes_caps:
            return BucketCaps(tuple(config.per_bucket_bytes_caps))
        return BucketCaps((config.first_bucket_bytes_cap, config.bucket_bytes_cap))
    # Older DDP: its reducer rebuilds with a small first bucket only when the user gave no
    # ``bucket_cap_mb`` (seen on torch 2.11: with a cap given, every bucket had that cap).
    if not getattr(ddp, "bucket_bytes_cap_default", True):
        return BucketCaps((ddp.bucket_bytes_cap,))
    first = getattr(torch.distributed, "_DEFAULT_FIRST_BUCKET_BYTES", _FIRST_BUCKET_BYTES)
    return BucketCaps((first, ddp.bucket_bytes_cap))


class CompiledDDP(CompiledModule):
    """What ``compile()`` returns for a DDP module: calls run DDP itself, whose wrapped
    module runs its compiled ``forward`` (``compiled_forward``, installed on it).

    Parameters, ``no_sync()``, ``module`` and the rest are the DDP's (attribute lookup
    falls through to it).
    """

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the DDP module (its wrapped module's forward is the compiled one)."""
        return self._orig_mod(*args, **kwargs)


def compile_ddp(
    ddp: torch.nn.parallel.DistributedDataParallel, options: CompileOptions, pipeline: Pipeline
) -> CompiledDDP:
    """Install on ``ddp.module`` a forward compiled with graphs split at DDP's buckets,
    and return the DDP wrapped as a :class:`CompiledDDP`."""
    bucketed = BucketedPipeline(pipeline, ddp_bucket_caps(ddp))
    compiled = install_compiled_forward(ddp.module, options, bucketed)
    return CompiledDDP(ddp, compiled)


def compiled_inner(module: CompiledModule) -> CompiledFunction:
    """The compiled forward of the module a :class:`CompiledDDP` wraps."""
    return module.compiled_forward
