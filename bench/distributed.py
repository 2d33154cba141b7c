"""``python -m bench.distributed``: DDP and FSDP2 training-step throughput with several
processes on one host, eager vs torch.compile vs torchstrata, in one run.

    python -m bench.distributed                          # 2 processes, CPU/gloo (CUDA/NCCL if present)
    python -m bench.distributed --world 2 --steps 20 --layers 4 --dim 256
    python -m bench.distributed --engines ddp --compilers eager,torchstrata

Each (engine, compiler) pair builds the same GPT (``bench/workloads/nets/gpt.py``, random
init, same seed on every rank), runs ``--warmup`` steps (compilation), then times
``--steps`` steps of forward, backward and AdamW; a step's time is the slowest rank's.
"""

from __future__ import annotations

import argparse
import datetime
import os
import tempfile
import time
import warnings
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

from bench.compilers import COMPILERS, CompilerUnavailable, compile_with, describe_error, reset
from bench.workloads.nets.gpt import GPT, GPTConfig

ENGINES = ("ddp", "fsdp2")


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(prog="python -m bench.distributed", description=__doc__)
    parser.add_argument("--world", type=int, default=2, help="processes (GPUs with CUDA)")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--compilers", default=",".join(COMPILERS))
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps (compilation)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batch", type=int, default=4)
    return parser


def _device(rank: int) -> torch.device:
    return torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _wrapped(engine: str, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    if engine == "ddp":
        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return model


def _measure(engine: str, compiler: str, rank: int, args: argparse.Namespace) -> dict[str, Any]:
    """One (engine, compiler) pair on this rank: seconds per step (slowest rank)."""
    device = _device(rank)
    cfg = GPTConfig(args.layers, args.heads, args.dim, 512, args.seq)
    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    wrapped = _wrapped(engine, model, device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = compile_with(compiler, wrapped)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        generator = torch.Generator().manual_seed(rank)
        tokens = torch.randint(0, cfg.vocab, (args.batch, args.seq + 1), generator=generator)
        idx = tokens[:, :-1].contiguous().to(device)
        targets = tokens[:, 1:].contiguous().to(device)  # GPT reads it with view(-1)

        def step() -> None:
            run(idx, targets).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        for _ in range(args.warmup):
            step()
        _sync(device)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        _sync(device)
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # a step ends when the slowest rank's does
    fallbacks = sorted(
        {str(w.message)[:160] for w in caught if "Fallback" in type(w.message).__name__}
    )
    return {"step_ms": 1e3 * elapsed.item() / args.steps, "notes": fallbacks}


def _worker(rank: int, args: argparse.Namespace, init_file: str) -> None:
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=args.world,
        timeout=datetime.timedelta(minutes=10),
    )
    rows = []
    for engine in args.engines.split(","):
        for compiler in ["eager", *[c for c in args.compilers.split(",") if c != "eager"]]:
            try:
                result = _measure(engine, compiler, rank, args)
            except CompilerUnavailable as error:
                result = {"step_ms": float("nan"), "notes": [f"unavailable: {error}"]}
            except Exception as error:  # noqa: BLE001 - one failing pair must not end the run
                result = {"step_ms": float("nan"), "notes": [describe_error(error)]}
            reset(compiler)
            rows.append((engine, compiler, result))
    if rank == 0:
        _print(rows, args, backend)
    dist.destroy_process_group()


def _print(
    rows: list[tuple[str, str, dict[str, Any]]], args: argparse.Namespace, backend: str
) -> None:
    tokens = args.batch * args.seq * args.world
    print(
        f"{args.world} processes, {backend}, GPT {args.layers}x{args.dim}, batch {args.batch}x"
        f"{args.seq} per rank, {args.steps} timed steps after {args.warmup}"
    )
    print(f"{'engine':8} {'compiler':12} {'ms/step':>9} {'tokens/s':>10} {'vs eager':>9}")
    eager = {engine: r["step_ms"] for engine, compiler, r in rows if compiler == "eager"}
    for engine, compiler, result in rows:
        ms = result["step_ms"]
        ratio = eager[engine] / ms if ms == ms else float("nan")
        print(f"{engine:8} {compiler:12} {ms:9.2f} {tokens / ms * 1e3:10.0f} {ratio:8.2f}x")
        for note in result["notes"]:
            print(f"    note: {note}")


def main(argv: list[str] | None = None) -> None:
    """Run every pair in ``--world`` spawned processes and print a table (rank 0)."""
    args = build_parser().parse_args(argv)
    for engine in args.engines.split(","):
        if engine not in ENGINES:
            raise SystemExit(f"unknown engine {engine!r}; choose from {ENGINES}")
    if torch.cuda.is_available() and torch.cuda.device_count() < args.world:
        raise SystemExit(f"--world {args.world} but {torch.cuda.device_count()} GPU(s)")
    with tempfile.TemporaryDirectory() as scratch:
        mp.spawn(_worker, args=(args, os.path.join(scratch, "init")), nprocs=args.world)


if __name__ == "__main__":
    main()
