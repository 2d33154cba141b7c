"""Compile time against depth: the bench GPT's first training step at several depths.

Each (depth, compiler) pair runs ``python -m bench.compile_scaling --child ...`` in a
fresh process with fresh, empty compiler caches (``bench.cold.CACHE_VARIABLES``), one
process at a time, so the runs never compete with each other for the cores. The model
is bench/workloads/nets/gpt.py at width 128, 4 heads, vocab 8192, batch 2, 64 tokens,
fp32; one step is forward + cross-entropy + backward. Eager's first step (also in a fresh
process) is the baseline: a compiler's cold compile is its first step minus eager's.
Reported: the median over ``--repeat`` processes of each first step, the cold compile,
its growth from the smallest depth, torchstrata's cold compile over torch.compile's and
the load average when each row started (the machine may be shared). Each run uses one
torch thread unless ``--threads`` says otherwise: on a loaded 2-core machine OpenMP teams
wait for descheduled threads, and the compile is what is measured.

    python -m bench.compile_scaling --layers 2,4,8,16,24 --compilers torchstrata,inductor
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from bench.cold import CACHE_VARIABLES, REPO_ROOT
from bench.compilers import LABELS, compile_with, describe_error, fallback_note, parse_compilers
from bench.workloads.nets.gpt import GPT, GPTConfig

HEADS, WIDTH, VOCAB, BATCH, TOKENS = 4, 128, 8192, 2, 64


def first_step_seconds(
    layers: int, compiler: str, device: str, inductor: dict[str, Any] | None = None
) -> float:
    """Build the model (outside the clock), then time compile + the first training step.

    Raises RuntimeError when the compiler said it fell back to eager (its time would
    then measure eager, not a compile).
    """
    torch.manual_seed(0)
    model = GPT(GPTConfig(layers, HEADS, WIDTH, VOCAB, TOKENS)).to(device)
    idx = torch.randint(0, VOCAB, (BATCH, TOKENS), device=device)
    targets = torch.randint(0, VOCAB, (BATCH, TOKENS), device=device)
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        start = time.perf_counter()
        compile_with(compiler, model, _options(inductor or {}))(idx, targets).backward()
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    note = fallback_note(records)
    if note is not None and compiler != "eager":
        raise RuntimeError(f"falls back to eager: {note}")
    return seconds


def _options(inductor: dict[str, Any]) -> Any:
    """torchstrata's options with these ``InductorOptions`` fields (none: the defaults)."""
    if not inductor:
        return None
    from torchstrata.core import CompileOptions, InductorOptions

    return CompileOptions(inductor=InductorOptions(**inductor))


def parse_inductor(settings: list[str]) -> dict[str, Any]:
    """``NAME=VALUE`` settings of ``InductorOptions`` fields (ints, or true/false)."""
    fields: dict[str, Any] = {}
    for setting in settings:
        name, sep, text = setting.partition("=")
        if not sep:
            raise SystemExit(f"--inductor {setting!r}: expected NAME=VALUE")
        lowered = text.strip().lower()
        value: Any = {"true": True, "false": False}.get(lowered)
        fields[name.strip()] = int(text) if value is None else value
    return fields


def run_fresh(
    layers: int,
    compiler: str,
    device: str,
    timeout_s: float,
    threads: int = 1,
    inductor: list[str] | None = None,
) -> float | str:
    """:func:`first_step_seconds` in a new process with empty caches; seconds or an error.
    ``inductor``: ``NAME=VALUE`` settings of ``InductorOptions`` (see :func:`parse_inductor`)."""
    scratch = Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    env = dict(os.environ)
    for variable in CACHE_VARIABLES:
        env[variable] = str(scratch / variable.lower())
    command = [sys.executable, "-m", "bench.compile_scaling", "--child", "--device", device]
    command += ["--layers", str(layers), "--compilers", compiler, "--threads", str(threads)]
    for setting in inductor or ():
        command += ["--inductor", setting]
    try:
        done = subprocess.run(
            command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return f"timeout after {timeout_s:.0f} s"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"error: exit {done.returncode}: {tail[:160]}"
    return answer["seconds"] if "seconds" in answer else str(answer.get("error"))


def median_fresh(
    layers: int,
    compiler: str,
    device: str,
    timeout_s: float,
    repeat: int,
    threads: int = 1,
    inductor: list[str] | None = None,
) -> float | str:
    """The median of ``repeat`` fresh runs, or the first error."""
    times: list[float] = []
    for _ in range(repeat):
        result = run_fresh(layers, compiler, device, timeout_s, threads, inductor)
        if isinstance(result, str):
            return result
        times.append(result)
    return statistics.median(times)


def _child(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    layers = int(args.layers.split(",")[0])
    compiler = parse_compilers(args.compilers)[-1]
    try:
        seconds = first_step_seconds(layers, compiler, args.device, parse_inductor(args.inductor))
    except Exception as exc:  # noqa: BLE001 - reported to the parent as a status
        print(json.dumps({"error": describe_error(exc)}))
        return 1
    print(json.dumps({"seconds": seconds}))
    return 0


def _commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return done.stdout.strip()


def _load() -> str:
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    """Print one row per depth: each compiler's first step, cold compile and growth."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--layers", default="2,8,24", help="comma-separated depths")
    parser.add_argument("--compilers", default="torchstrata,inductor")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--repeat", type=int, default=1, help="fresh processes per cell")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of each run (default 1: OpenMP teams stall on a shared machine)",
    )
    parser.add_argument(
        "--compile-threads",
        type=int,
        default=None,
        help="torchstrata's InductorOptions.compile_threads (default: its own default)",
    )
    parser.add_argument(
        "--inductor",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an InductorOptions field for torchstrata (repeatable): tune_min_elements=0",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.compile_threads is not None:
        args.inductor.append(f"compile_threads={args.compile_threads}")
    if args.child:
        return _child(args)
    depths = [int(part) for part in args.layers.split(",")]
    compilers = parse_compilers(args.compilers)
    compiled = [c for c in compilers if c != "eager"]
    print(f"# command: python -m bench.compile_scaling {' '.join(argv or sys.argv[1:])}")
    print(
        f"# commit {_commit()}, torch {torch.__version__}, {args.device}, "
        f"{os.cpu_count()} CPUs, {args.threads} torch thread(s), "
        f"median of {args.repeat} fresh process(es) per cell"
    )
    print(f"# GPT d={WIDTH} heads={HEADS} vocab={VOCAB} batch={BATCH} tokens={TOKENS} fp32")
    print("# first step: compile + forward + loss + backward, empty caches;")
    print("# cold: first step - eager's first step (growth: against the smallest depth)")
    header = ["layers", "load avg 1/5/15"] + [f"{LABELS[c]} first step" for c in compilers]
    header += [f"{LABELS[c]} cold" for c in compiled]
    if {"torchstrata", "inductor"} <= set(compiled):
        header.append("torchstrata / torch.compile cold")
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    base: dict[str, float] = {}
    cold_at: dict[tuple[str, int], float] = {}
    for layers in depths:
        load = _load()
        results = {
            c: median_fresh(
                layers,
                c,
                args.device,
                args.timeout,
                args.repeat,
                args.threads,
                args.inductor,
            )
            for c in compilers
        }
        cells = [str(layers), load]
        cells += [f"{r:.1f} s" if isinstance(r, float) else r for r in results.values()]
        eager = results["eager"]
        for compiler in compiled:
            result = results[compiler]
            if isinstance(result, float) and isinstance(eager, float):
                cold = result - eager
                cold_at[compiler, layers] = cold
                growth = cold / base.setdefault(compiler, cold)
                cells.append(f"{cold:.1f} s ({growth:.2f}x)")
            else:
                cells.append("n/a")
        if len(header) > len(cells):
            ours, theirs = cold_at.get(("torchstrata", layers)), cold_at.get(("inductor", layers))
            cells.append(f"{ours / theirs:.2f}" if ours is not None and theirs else "n/a")
        print("| " + " | ".join(cells) + " |", flush=True)
    for compiler in compiled:
        if (compiler, 4) in cold_at and (compiler, 16) in cold_at:
            growth = cold_at[compiler, 16] / cold_at[compiler, 4]
            print(f"# {LABELS[compiler]} cold compile growth 4 -> 16 layers: {growth:.2f}x")
    print(f"# load average at the end: {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
