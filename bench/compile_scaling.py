"""Compile time against depth: the bench GPT's first training step at several depths.

Each (depth, compiler) pair runs ``python -m bench.compile_scaling --child ...`` in a
fresh process with fresh, empty compiler caches (``bench.cold.CACHE_VARIABLES``), one
process at a time, so the runs never compete with each other for the cores. The model
is bench/workloads/nets/gpt.py at width 128, 4 heads, vocab 8192, batch 2, 64 tokens,
fp32; one step is forward + cross-entropy + backward. Eager's first step (also in a fresh
process) is the baseline: a compiler's cold compile is its first step minus eager's.
Reported: the median over ``--repeat`` processes of each first step, the cold compile,
its growth from the smallest depth, torchstrata's cold compile over torch.compile's and
the load average when each row started (the machine may be shared). Each cell also has
its CPU seconds: the process's own (all its threads) and those of the child processes it
waited for (the C++ compiler), around the same step: on a shared machine the wall time
includes waiting for the cores, the CPU time does not. Each run uses one
torch thread unless ``--threads`` says otherwise: on a loaded 2-core machine OpenMP teams
wait for descheduled threads, and the compile is what is measured.

    python -m bench.compile_scaling --layers 2,4,8,16,24 --compilers torchstrata,inductor
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def _cpu_seconds() -> float:
    """CPU seconds of this process (every thread) and of its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def first_step_seconds(
    layers: int,
    compiler: str,
    device: str,
    inductor: dict[str, Any] | None = None,
    cpu: list[float] | None = None,
) -> float:
    """Build the model (outside the clock), then time compile + the first training step;
    its CPU seconds (:func:`_cpu_seconds`) are appended to ``cpu`` when given.

    Raises RuntimeError when the compiler said it fell back to eager (its time would
    then measure eager, not a compile).
    """
    torch.manual_seed(0)
    model = GPT(GPTConfig(layers, HEADS, WIDTH, VOCAB, TOKENS)).to(device)
    idx = torch.randint(0, VOCAB, (BATCH, TOKENS), device=device)
    targets = torch.randint(0, VOCAB, (BATCH, TOKENS), device=device)
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        start, cpu_start = time.perf_counter(), _cpu_seconds()
        compile_with(compiler, model, _options(inductor or {}))(idx, targets).backward()
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        if cpu is not None:
            cpu.append(_cpu_seconds() - cpu_start)
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
) -> tuple[float, float] | str:
    """:func:`first_step_seconds` in a new process with empty caches: wall and CPU
    seconds, or an error. ``inductor``: ``NAME=VALUE`` settings of ``InductorOptions``
    (see :func:`parse_inductor`)."""
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
    if "seconds" not in answer:
        return str(answer.get("error"))
    return answer["seconds"], answer["cpu"]


def median_fresh(
    layers: int,
    compiler: str,
    device: str,
    timeout_s: float,
    repeat: int,
    threads: int = 1,
    inductor: list[str] | None = None,
) -> tuple[float, float] | str:
    """The medians of ``repeat`` fresh runs' wall and CPU seconds, or the first error."""
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(repeat):
        result = run_fresh(layers, compiler, device, timeout_s, threads, inductor)
        if isinstance(result, str):
            return result
        walls.append(result[0])
        cpus.append(result[1])
    return statistics.median(walls), statistics.median(cpus)


def _child(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    layers = int(args.layers.split(",")[0])
    compiler = parse_compilers(args.compilers)[-1]
    cpu: list[float] = []
    try:
        seconds = first_step_seconds(
            layers, compiler, args.device, parse_inductor(args.inductor), cpu
        )
    except Exception as exc:  # noqa: BLE001 - reported to the parent as a status
        print(json.dumps({"error": describe_error(exc)}))
        return 1
    print(json.dumps({"seconds": seconds, "cpu": cpu[0]}))
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
    print("# each cell: wall seconds / CPU seconds (the process's threads and its children)")
    header = ["layers", "load avg 1/5/15"] + [f"{LABELS[c]} first step" for c in compilers]
    header += [f"{LABELS[c]} cold" for c in compiled]
    both = {"torchstrata", "inductor"} <= set(compiled)
    if both:
        header.append("torchstrata / torch.compile cold (wall / CPU)")
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    base: dict[str, tuple[float, float]] = {}
    cold_at: dict[tuple[str, int], tuple[float, float]] = {}
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
        cells += [
            r if isinstance(r, str) else f"{r[0]:.1f} / {r[1]:.1f} s" for r in results.values()
        ]
        eager = results["eager"]
        for compiler in compiled:
            result = results[compiler]
            if not isinstance(result, str) and not isinstance(eager, str):
                cold = (result[0] - eager[0], result[1] - eager[1])
                cold_at[compiler, layers] = cold
                first = base.setdefault(compiler, cold)
                cells.append(
                    f"{cold[0]:.1f} s ({cold[0] / first[0]:.2f}x) / "
                    f"{cold[1]:.1f} s ({cold[1] / first[1]:.2f}x)"
                )
            else:
                cells.append("n/a")
        if both:
            ours, theirs = cold_at.get(("torchstrata", layers)), cold_at.get(("inductor", layers))
            if ours is not None and theirs is not None and theirs[0] and theirs[1]:
                cells.append(f"{ours[0] / theirs[0]:.2f} / {ours[1] / theirs[1]:.2f}")
            else:
                cells.append("n/a")
        print("| " + " | ".join(cells) + " |", flush=True)
    for compiler in compiled:
        if (compiler, 4) in cold_at and (compiler, 16) in cold_at:
            wall = cold_at[compiler, 16][0] / cold_at[compiler, 4][0]
            cpu = cold_at[compiler, 16][1] / cold_at[compiler, 4][1]
            print(
                f"# {LABELS[compiler]} cold compile growth 4 -> 16 layers: "
                f"{wall:.2f}x wall, {cpu:.2f}x CPU"
            )
    print(f"# load average at the end: {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
