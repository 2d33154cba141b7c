"""Warm start: the first training step of a fresh process, with an empty cache and with
the cache the first process left.

``python -m bench.warm_start --layers 8`` runs the bench GPT (width 128, 4 heads, vocab
8192, batch 2, 64 tokens, fp32 on the CPU; one step = forward + cross-entropy +
backward) compiled by ``torchstrata.runtime.compile``, first step only, in three fresh
processes one after the other:

1. eager (no compiler): what the step costs by itself in a new process;
2. cold: torchstrata with an empty cache directory (``CompileOptions.cache_dir``);
3. warm: torchstrata again with the cache directory that process 2 filled.

It prints the three times (wall clock, and CPU seconds of the process and its C++
compilers, which a machine shared with other work disturbs less), warm / cold, and the
compiled-graph cache counters of the warm processes (they must hit, or the ratio means
nothing). ``--repeat N`` runs the three
N times, each cold with a new empty directory, and reports medians. Model building and
imports are outside the clock; the step is checked against eager's loss.

``--dynamic`` measures the first step of a new size instead (decision 0450): the model
compiled with ``dynamic=True`` (its sequence length symbolic, lowered once for many
sizes), the cold process at 48 tokens with an empty cache, the warm one at 48 tokens
with the cache that a process at 64 tokens filled: a size the cache never saw, served by
the stored lowering (the warm processes' ``size_lowering_stats()`` are printed: ``cached``
and no ``symbolic`` or ``per_size`` lowering).

``--autocast`` runs the step (eager's, and the compiled one's capture and lowering)
under CPU autocast to bfloat16 (decision 0505: such a lowering is stored since then); the
loss is checked against eager's under autocast, to bfloat16's precision.

``--codegen triton`` compiles with the Triton backend (on the CPU: under Triton's
interpreter, slow, but what a warm process skips is the same: scheduling and code
generation); ``--device cuda`` runs the model on the GPU (Triton's compiled kernels,
their binaries from the verified store in the warm process; the step is synchronized
before the clock stops).
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
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
#: Cache locations a run must not share with the user's own caches.
CACHE_VARIABLES = ("TORCHSTRATA_CACHE_DIR", "XDG_CACHE_HOME", "TRITON_CACHE_DIR")


def _cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (the C++ compilers): less
    disturbed than wall time on a machine shared with other work."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


#: ``--dynamic``: the sequence length of the process that fills the cache, and of the
#: cold and warm processes (a size the filled cache never saw)
FILL_TOKENS, NEW_TOKENS = 64, 48


def first_step(
    layers: int,
    cache_dir: str | None,
    device: str = "cpu",
    codegen: str = "default",
    tokens: int = 64,
    dynamic: bool = False,
    autocast: bool = False,
) -> dict[str, Any]:
    """Build the model on ``device`` (outside the clock), then time compile + the first
    training step (eager when ``cache_dir`` is None) with the ``codegen`` backend, on a
    batch of ``tokens`` tokens (``dynamic``: compiled with ``dynamic=True``;
    ``autocast``: the forward under autocast to bfloat16)."""
    import contextlib

    import torch
    import torch.nn.functional as F  # noqa: F401 - the model's import, outside the clock

    from bench.workloads.nets.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layers=layers, n_heads=4, dim=128, vocab=8192, block=64))
    idx = torch.randint(0, 8192, (2, tokens))
    targets = torch.randint(0, 8192, (2, tokens))
    model, idx, targets = model.to(device), idx.to(device), targets.to(device)

    def mixed() -> Any:
        if not autocast:
            return contextlib.nullcontext()
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)

    with torch.no_grad(), mixed():
        expected = model(idx, targets).item()

    def synchronize() -> None:
        if device != "cpu":
            torch.cuda.synchronize()

    def timed_step(step: Any) -> tuple[Any, float, float]:
        """The loss of one training step, its wall and CPU seconds."""
        synchronize()
        start, cpu = time.perf_counter(), _cpu_seconds()
        with mixed():
            loss = step(idx, targets)
        loss.backward()
        synchronize()
        return loss, time.perf_counter() - start, _cpu_seconds() - cpu

    if cache_dir is None:
        loss, seconds, cpu = timed_step(model)
        next_seconds = timed_step(model)[1]
        return {
            "seconds": seconds,
            "cpu_seconds": cpu,
            "next_step_seconds": next_seconds,
            "loss": loss.item(),
        }
    import torchstrata.runtime as runtime
    from torchstrata.core import CompileOptions

    options = CompileOptions(cache_dir=cache_dir)
    if codegen != "default":
        options = CompileOptions(cache_dir=cache_dir, codegen=codegen)
    compiled: list[Any] = []

    def compile_and_step(*inputs: Any) -> Any:
        compiled.append(runtime.compile(model, options=options, dynamic=dynamic or None))
        return compiled[0](*inputs)

    loss, seconds, cpu = timed_step(compile_and_step)
    stats = runtime.graph_cache_stats()
    # the step itself, compiled (under Triton's interpreter most of a warm first step)
    next_seconds = timed_step(compiled[0])[1]
    tolerance = 2e-2 if autocast else 1e-4  # bfloat16 rounds the matmuls' inputs
    if abs(loss.item() - expected) > tolerance * max(1.0, abs(expected)):
        raise AssertionError(f"compiled loss {loss.item()} differs from eager's {expected}")
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "next_step_seconds": next_seconds,
        "loss": loss.item(),
        "graph_cache": {"hits": stats.hits, "misses": stats.misses, "stores": stats.stores},
        "sizes": runtime.size_lowering_stats(),
        # torch's symbolic shapes (sympy) cost a second to import; a warm step needs none
        "sympy_imported": "sympy" in sys.modules,
    }


def run_child(
    layers: int,
    cache_dir: str | None,
    device: str = "cpu",
    codegen: str = "default",
    tokens: int = 64,
    dynamic: bool = False,
    autocast: bool = False,
) -> dict[str, Any]:
    """:func:`first_step` in a fresh ``python -m bench.warm_start --child`` process."""
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES}
    command = [sys.executable, "-m", "bench.warm_start", "--child", "--layers", str(layers)]
    command += ["--device", device, "--codegen", codegen, "--tokens", str(tokens)]
    command += ["--dynamic"] if dynamic else []
    command += ["--autocast"] if autocast else []
    command += ["--cache-dir", cache_dir] if cache_dir is not None else []
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"child failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(lines[-1])


def measure(
    layers: int,
    repeat: int,
    device: str = "cpu",
    codegen: str = "default",
    dynamic: bool = False,
    autocast: bool = False,
) -> dict[str, Any]:
    """``repeat`` rounds of eager, cold and warm first steps; medians and the ratio
    (``dynamic``: of a new size, see the module docstring)."""
    rounds = []
    tokens = NEW_TOKENS if dynamic else 64
    for _ in range(repeat):
        scratch = tempfile.mkdtemp(prefix="bench-warm-start-")
        filled = tempfile.mkdtemp(prefix="bench-warm-start-")
        try:
            eager = run_child(layers, None, device, codegen, tokens, False, autocast)
            cold = run_child(layers, scratch, device, codegen, tokens, dynamic, autocast)
            if dynamic:  # the warm process's size is one the cache never saw
                run_child(layers, filled, device, codegen, FILL_TOKENS, dynamic, autocast)
            else:
                filled = scratch
            warm = run_child(layers, filled, device, codegen, tokens, dynamic, autocast)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            shutil.rmtree(filled, ignore_errors=True)
        rounds.append({"eager": eager, "cold": cold, "warm": warm})
    names = ("eager", "cold", "warm")
    median = {name: statistics.median(r[name]["seconds"] for r in rounds) for name in names}
    cpu = {name: statistics.median(r[name]["cpu_seconds"] for r in rounds) for name in names}
    ratios = [r["warm"]["seconds"] / r["cold"]["seconds"] for r in rounds]
    steady = {
        name: statistics.median(r[name]["next_step_seconds"] for r in rounds) for name in names
    }
    return {
        "layers": layers,
        "device": device,
        "codegen": codegen,
        "dynamic": dynamic,
        "autocast": autocast,
        "rounds": rounds,
        "median_seconds": median,
        "median_cpu_seconds": cpu,
        "median_next_step_seconds": steady,
        "warm_over_cold": median["warm"] / median["cold"],
        "warm_over_cold_per_round": ratios,
        "warm_over_cold_cpu": cpu["warm"] / cpu["cold"],
    }


def report(result: dict[str, Any]) -> str:
    """The table printed for a :func:`measure` result."""
    wall, cpu = result["median_seconds"], result["median_cpu_seconds"]
    steady = result["median_next_step_seconds"]
    warm_cache = [r["warm"]["graph_cache"] for r in result["rounds"]]
    warm_sizes = [r["warm"].get("sizes") for r in result["rounds"]]
    tokens = f"{NEW_TOKENS} tokens, dynamic=True" if result.get("dynamic") else "64 tokens"
    warm_from = f" (filled at {FILL_TOKENS} tokens)" if result.get("dynamic") else ""
    per_round = ", ".join(f"{ratio:.3f}" for ratio in result["warm_over_cold_per_round"])
    lines = [
        f"GPT {result['layers']} layers, width 128, 4 heads, vocab 8192, batch 2 x {tokens}, "
        f"{'bf16 autocast' if result.get('autocast') else 'fp32'} "
        f"{result.get('device', 'cpu')}, codegen {result.get('codegen', 'default')}; "
        f"first training step in a fresh process, median of "
        f"{len(result['rounds'])}",
        "                              wall s     CPU s",
        f"  eager first step:          {wall['eager']:8.2f}  {cpu['eager']:8.2f}",
        f"  torchstrata cold (empty):  {wall['cold']:8.2f}  {cpu['cold']:8.2f}",
        f"  torchstrata warm (cached): {wall['warm']:8.2f}  {cpu['warm']:8.2f}",
        f"  warm / cold:               {result['warm_over_cold']:8.3f}  "
        f"{result['warm_over_cold_cpu']:8.3f}",
        f"  warm / cold wall, per round: {per_round}",
        "  second step (compiled, no compile), wall s: "
        + ", ".join(f"{name} {seconds:.2f}" for name, seconds in steady.items()),
        f"  warm processes' graph cache{warm_from}: {warm_cache}",
        f"  warm processes' size lowerings: {warm_sizes}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.warm_start --layers 8 [--repeat N] [--device cuda] [--codegen
    triton] [--dynamic] [--autocast] [--json PATH]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--codegen", choices=("default", "cpp", "triton"), default="default")
    parser.add_argument("--dynamic", action="store_true", help="the first step of a new size")
    parser.add_argument("--autocast", action="store_true", help="the step under bf16 autocast")
    parser.add_argument("--json", help="also write the measurements here")
    parser.add_argument("--tokens", type=int, default=64, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        measured = first_step(
            args.layers,
            args.cache_dir,
            args.device,
            args.codegen,
            args.tokens,
            args.dynamic,
            args.autocast,
        )
        print(json.dumps(measured))
        return 0
    result = measure(
        args.layers, args.repeat, args.device, args.codegen, args.dynamic, args.autocast
    )
    print(report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
