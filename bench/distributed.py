"""``python -m bench.distributed``: DDP and FSDP2 training-step throughput with several
processes on one host, eager vs torch.compile vs torchstrata, in one run.

    python -m bench.distributed                          # 2 processes, CPU/gloo (CUDA/NCCL if present)
    python -m bench.distributed --world 2 --steps 20 --layers 4 --dim 256
    python -m bench.distributed --engines ddp --compilers eager,torchstrata
    python -m bench.distributed --json bench/results/<date>-cpu-distributed.json

Each (engine, compiler) pair builds the same GPT (``bench/workloads/nets/gpt.py``, random
init, same seed on every rank), runs ``--warmup`` steps (compilation), then times
``--steps`` steps of forward, backward and AdamW; a step's time is the slowest rank's.
Every pair trains from the same weights on the same batches, so its last loss must equal
eager's up to rounding: the table shows the difference (a wrong result is not hidden by
a fast time). On the CPU each process runs ``--threads`` threads (default: the cores
divided among the processes); the load average before and after the run is printed,
since other work on the machine slows the processes unevenly.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import sys
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
from bench.report import run_metadata
from bench.workloads.nets.gpt import GPT, GPTConfig

ENGINES = ("ddp", "fsdp2")
NAN = float("nan")


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
    parser.add_argument(
        "--threads", type=int, default=0, help="CPU threads per process (0: cores / world)"
    )
    parser.add_argument("--json", help="also write the rows and run metadata to this file")
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

        def step() -> torch.Tensor:
            loss = run(idx, targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss.detach()

        for _ in range(args.warmup):
            step()
        _sync(device)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.steps):
            loss = step()
        _sync(device)
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # a step ends when the slowest rank's does
    fallbacks = sorted(
        {str(w.message)[:160] for w in caught if "Fallback" in type(w.message).__name__}
    )
    return {
        "step_ms": 1e3 * elapsed.item() / args.steps,
        "last_loss": loss.item(),
        "notes": fallbacks,
    }


def _threads(args: argparse.Namespace) -> int:
    """CPU threads per process: ``--threads``, or the cores shared among the processes."""
    return args.threads or max(1, (os.cpu_count() or 1) // args.world)


def _worker(rank: int, args: argparse.Namespace, init_file: str) -> None:
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)
    torch.set_num_threads(_threads(args))
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
                result = {"step_ms": NAN, "last_loss": NAN, "notes": [f"unavailable: {error}"]}
            except Exception as error:  # noqa: BLE001 - one failing pair must not end the run
                result = {"step_ms": NAN, "last_loss": NAN, "notes": [describe_error(error)]}
            reset(compiler)
            rows.append((engine, compiler, result))
    if rank == 0:
        _print(rows, args, backend)
        if args.json:
            _write_json(rows, args, backend)
    gc.collect()  # DDP reducers go while the group lives (see examples/train_ddp.py)
    dist.destroy_process_group()


def _print(
    rows: list[tuple[str, str, dict[str, Any]]], args: argparse.Namespace, backend: str
) -> None:
    tokens = args.batch * args.seq * args.world
    threads = f", {_threads(args)} thread(s) each" if backend == "gloo" else ""
    print(
        f"{args.world} processes{threads}, {backend}, GPT {args.layers}x{args.dim}, batch "
        f"{args.batch}x{args.seq} per rank, {args.steps} timed steps after {args.warmup}"
    )
    header = f"{'engine':8} {'compiler':12} {'ms/step':>9} {'tokens/s':>10} {'vs eager':>9}"
    print(f"{header} {'vs compile':>10} {'loss - eager':>13}")
    eager = {engine: r for engine, compiler, r in rows if compiler == "eager"}
    inductor = {engine: r for engine, compiler, r in rows if compiler == "inductor"}
    for engine, compiler, result in rows:
        ms = result["step_ms"]
        versus_eager = eager[engine]["step_ms"] / ms
        versus_compile = inductor[engine]["step_ms"] / ms if engine in inductor else NAN
        loss_diff = result["last_loss"] - eager[engine]["last_loss"]
        print(
            f"{engine:8} {compiler:12} {ms:9.2f} {tokens / ms * 1e3:10.0f} {versus_eager:8.2f}x"
            f" {versus_compile:9.2f}x {loss_diff:13.1e}"
        )
        for note in result["notes"]:
            print(f"    note: {note}")


def _write_json(
    rows: list[tuple[str, str, dict[str, Any]]], args: argparse.Namespace, backend: str
) -> None:
    meta = run_metadata(_device(0), False, [])
    meta["command"] = " ".join(["python", "-m", "bench.distributed", *sys.argv[1:]])
    meta.update(backend=backend, world=args.world, threads_per_process=_threads(args))
    meta["load_average_before"] = args.load_before
    meta["load_average_after"] = list(os.getloadavg())
    document = {
        "meta": meta,
        "config": {k: getattr(args, k) for k in ("layers", "dim", "heads", "seq", "batch")},
        "steps": args.steps,
        "warmup": args.warmup,
        "rows": [{"engine": e, "compiler": c, **r} for e, c, r in rows],
    }
    with open(args.json, "w") as out:
        out.write(json.dumps(document, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    """Run every pair in ``--world`` spawned processes and print a table (rank 0)."""
    args = build_parser().parse_args(argv)
    for engine in args.engines.split(","):
        if engine not in ENGINES:
            raise SystemExit(f"unknown engine {engine!r}; choose from {ENGINES}")
    if torch.cuda.is_available() and torch.cuda.device_count() < args.world:
        raise SystemExit(f"--world {args.world} but {torch.cuda.device_count()} GPU(s)")
    args.load_before = list(os.getloadavg())
    print(f"load average (1, 5, 15 min) before: {_load(args.load_before)}", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        mp.spawn(_worker, args=(args, os.path.join(scratch, "init")), nprocs=args.world)
    print(f"load average (1, 5, 15 min) after: {_load(os.getloadavg())}")


def _load(averages: list[float] | tuple[float, ...]) -> str:
    return ", ".join(f"{a:.1f}" for a in averages)


if __name__ == "__main__":
    main()
