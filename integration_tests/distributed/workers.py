"""What each gloo process of the distributed tests runs: every scenario trained eagerly
and compiled from the same seed, the parameters saved after every step.

Scenarios run one after another in the same processes (one process group, one import
of torch and torchstrata), so each world size costs one spawn.
"""

from __future__ import annotations

import datetime
import gc
import os
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

import torchstrata.runtime as rt

from .models import TinyLM, batch, loss_of

STEPS = 10
#: Small buckets (about 6 KiB; the model's weights are 1-4 KiB each) so that the
#: compiled graph is cut into several pieces.
BUCKET_CAP_MB = 0.006


def _snapshot(model: torch.nn.Module) -> list[torch.Tensor]:
    """Every parameter, whole (FSDP's shards gathered)."""
    params = []
    for param in model.parameters():
        value = param.detach()
        if hasattr(value, "full_tensor"):
            value = value.full_tensor()
        params.append(value.clone())
    return params


def _train(
    model: torch.nn.Module,
    run: Callable[..., Any],
    rank: int,
    micro_batches: int = 1,
    no_sync: Callable[[], Any] | None = None,
    events: list[Any] | None = None,
    before_step: Callable[[int], None] | None = None,
    without_grad: list[list[bool]] | None = None,
) -> list[list[torch.Tensor]]:
    """``without_grad``: gets, for each step, whether each parameter has no gradient
    before the optimizer step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    snapshots = []
    for step in range(STEPS):
        if before_step is not None:
            before_step(step)
        for micro in range(micro_batches):
            if events is not None:
                events.append([])
            tokens, targets = batch(rank, step * micro_batches + micro)
            last = micro == micro_batches - 1
            if no_sync is not None and not last:
                with no_sync():
                    loss_of(run(tokens), targets).backward()
            else:
                loss_of(run(tokens), targets).backward()
        if without_grad is not None:
            without_grad.append([param.grad is None for param in model.parameters()])
        optimizer.step()
        optimizer.zero_grad()
        snapshots.append(_snapshot(model))
    return snapshots


def _entries(compiled: list[Any]) -> list[tuple[str, bool]]:
    """Each compiled function's cache entries: (why eager, or "", has graph breaks)."""
    return [
        (entry.reason if entry.run is None else "", entry.has_side_effects)
        for function in compiled
        for entry in function.cache.entries
    ]


def _fallbacks(caught: list[warnings.WarningMessage]) -> list[str]:
    """The messages of torchstrata's fallback warnings among ``caught``."""
    return [str(w.message) for w in caught if issubclass(w.category, rt.TorchstrataFallbackWarning)]


def _breaks(report: rt.ExplainReport) -> list[tuple[str, int, str]]:
    return [(b.filename, b.lineno, b.reason) for b in report.graph_breaks]


def ddp(
    rank: int,
    compiled: bool,
    unused: bool = False,
    accumulate: bool = False,
    detached: bool = False,
) -> Any:
    """DDP with small buckets; ``unused``: a layer that forward reads on every third step
    only, with ``find_unused_parameters`` (the compiled forward has an entry for each
    case); ``accumulate``: two micro-batches per step, the first under ``no_sync()``;
    ``detached``: a weight read through ``detach()`` only, with
    ``find_unused_parameters`` (which parameters have no gradient is recorded)."""
    torch.manual_seed(0)
    model = TinyLM(unused=unused, detached=detached)
    wrapped = DistributedDataParallel(
        model, bucket_cap_mb=BUCKET_CAP_MB, find_unused_parameters=unused or detached
    )
    # Per micro-batch, when each bucket is all-reduced: whether the embedding (read
    # first, so its gradient comes last) already has its gradient then.
    embed_done: list[list[bool]] = []

    def hook(state, bucket):
        embed_done[-1].append(model.embed.weight.grad is not None)
        return allreduce_hook(state, bucket)

    wrapped.register_comm_hook(None, hook)
    run = rt.compile(wrapped) if compiled else wrapped

    def before_step(step: int) -> None:
        model.read_unused = unused and step % 3 == 2

    without_grad: list[list[bool]] = []
    params = _train(
        model,
        run,
        rank,
        2 if accumulate else 1,
        wrapped.no_sync if accumulate else None,
        embed_done,
        before_step,
        without_grad,
    )
    result: dict[str, Any] = {
        "params": params,
        "embed_done": embed_done,
        "without_grad": without_grad,
    }
    if compiled:
        inner = run.compiled_forward
        result["entries"] = _entries([inner])
        result["pieces"] = list(inner.pipeline.piece_counts)
        result["breaks"] = _breaks(rt.explain(run, batch(rank, 0)[0]))
    return result


def fsdp(
    rank: int,
    compiled: bool,
    mixed: bool = False,
    checkpointed: bool = False,
    inline_checkpoint: bool = False,
) -> Any:
    """FSDP2: ``fully_shard`` on each block and on the root. ``mixed``: bfloat16
    parameters, float32 gradient reduction; ``checkpointed``: blocks wrapped with
    ``checkpoint_wrapper`` (activation checkpointing around each compiled block);
    ``inline_checkpoint``: each block calls ``torch.utils.checkpoint.checkpoint`` inside
    its compiled ``forward`` (captured: its nodes are recomputed in the backward)."""
    torch.manual_seed(0)
    model = TinyLM(checkpoint_mlp=inline_checkpoint)
    policy = MixedPrecisionPolicy(torch.bfloat16, torch.float32) if mixed else None
    # fully_shard's default mesh is on the accelerator when there is one: the gloo tests
    # shard over the CPU wherever they run (the data stays on the CPU)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    kwargs: dict[str, Any] = {"mesh": mesh}
    if policy is not None:
        kwargs["mp_policy"] = policy
    for index, block in enumerate(list(model.blocks)):
        if checkpointed:
            block = checkpoint_wrapper(block)
            model.blocks[index] = block
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    run = rt.compile(model) if compiled else model
    reports: list[rt.ExplainReport] = []
    handles = []
    if compiled and not mixed and not checkpointed and not inline_checkpoint:
        # explain a block where its compiled forward runs: between FSDP's hooks (after
        # the all-gather; FSDP's pre-hook comes first)
        def explain_block(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
            if not reports:
                reports.append(rt.explain(module.forward, *args))

        handles = [b.register_forward_pre_hook(explain_block) for b in model.blocks]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", rt.TorchstrataFallbackWarning)
        params = _train(model, run, rank)
    for handle in handles:
        handle.remove()
    result: dict[str, Any] = {"params": params, "warnings": _fallbacks(caught)}
    if compiled:
        result["regions"] = [type(m).__name__ for m in run.regions]
        result["entries"] = _entries(list(run.regions.values()))
        result["breaks"] = [_breaks(r) for r in reports]
        result["graphs"] = [r.graph_count for r in reports]
        if reports:  # the root, outside FSDP's hooks: why it is not one graph
            root = rt.explain(run, batch(rank, 0)[0])
            result["root_breaks"] = _breaks(root)
            result["root_fallback"] = root.fallback
    return result


def inline_checkpoint(rank: int, compiled: bool) -> Any:
    """DDP over a model whose blocks call ``torch.utils.checkpoint.checkpoint`` inside
    ``forward`` (captured: its nodes are recomputed in the backward)."""
    torch.manual_seed(0)
    model = TinyLM(layers=1, checkpoint_mlp=True)
    wrapped = DistributedDataParallel(model)
    run = rt.compile(wrapped) if compiled else wrapped
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", rt.TorchstrataFallbackWarning)
        params = _train(model, run, rank)
    result: dict[str, Any] = {"params": params, "warnings": _fallbacks(caught)}
    if compiled:
        result["entries"] = _entries([run.compiled_forward])
        result["breaks"] = _breaks(rt.explain(run, batch(rank, 0)[0]))
    return result


SCENARIOS: dict[str, Callable[..., Any]] = {
    "ddp": lambda rank, compiled: ddp(rank, compiled),
    "ddp_unused_accumulate": lambda rank, compiled: ddp(rank, compiled, True, True),
    "ddp_detached": lambda rank, compiled: ddp(rank, compiled, detached=True),
    "fsdp": lambda rank, compiled: fsdp(rank, compiled),
    "fsdp_mixed": lambda rank, compiled: fsdp(rank, compiled, mixed=True),
    "fsdp_checkpointed": lambda rank, compiled: fsdp(rank, compiled, checkpointed=True),
    "fsdp_inline_checkpoint": lambda rank, compiled: fsdp(rank, compiled, inline_checkpoint=True),
    "inline_checkpoint": inline_checkpoint,
}


def run_all(rank: int, world: int, init_file: str, out_dir: str, names: list[str]) -> None:
    """Entry point of each spawned process: every scenario in ``names``, eager then
    compiled; the results saved to ``out_dir/rank{rank}.pt``."""
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),  # a mismatch fails instead of hanging
    )
    try:
        results = {
            name: {compiled: SCENARIOS[name](rank, compiled) for compiled in (False, True)}
            for name in names
        }
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        gc.collect()  # DDP reducers go while the group lives (see examples/train_ddp.py)
        dist.destroy_process_group()
