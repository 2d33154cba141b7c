"""16-bit kernels on the CPU side by side: torchstrata / eager / torch.compile.

Nine kernels at [4096, 4096] (weights [4096]) in bf16 and fp16: x*sigmoid(x)*y, gelu,
swiglu, rmsnorm (fp32 math, as Llama's), layernorm, softmax, sum(-1), mean(-1), and a cast
chain (fp32 math between 16-bit loads and store). Each contender is compiled once per
kernel; then rounds run them in turn (the order rotating per round), each round timing
the median of ``--reps`` calls after two warm-up calls. A cell is the fastest round; the
spread is the slowest round over the fastest (how much the shared machine moved it).

    python -m bench.half_kernels --dtype bf16,fp16 --threads 1,2

With one thread the clock is this process's CPU time (steady on a shared machine); with
more, the wall clock (CPU time would add up the threads). ``equal`` says whether our
result equals eager's bit for bit; ``max err`` is the largest difference from eager in
units of the dtype's epsilon times the largest magnitude of eager's result.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from bench.compile_scaling import _commit, _load
from bench.compilers import fallback_note

Kernel = Callable[..., torch.Tensor]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _silu_mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x) * y


def _gelu(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x)


def _swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.silu(a) * b


def _rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * h.to(x.dtype)


def _layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def _rowsum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(-1)


def _rowmean(x: torch.Tensor) -> torch.Tensor:
    return x.mean(-1)


def _casts(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x.float() * 2 + y.float().exp()).to(x.dtype)


def cases(dtype: torch.dtype, rows: int, cols: int) -> dict[str, tuple[Kernel, tuple]]:
    """The kernels and their inputs (seeded normal values) in ``dtype``."""
    g = torch.Generator().manual_seed(0)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype)

    m, n = rows, cols
    return {
        "x*sigmoid(x)*y": (_silu_mul, (r(m, n), r(m, n))),
        "gelu": (_gelu, (r(m, n),)),
        "swiglu": (_swiglu, (r(m, n), r(m, n))),
        "rmsnorm": (_rmsnorm, (r(m, n), r(n))),
        "layernorm": (_layernorm, (r(m, n), r(n), r(n))),
        "softmax": (_softmax, (r(m, n),)),
        "sum(-1)": (_rowsum, (r(m, n),)),
        "mean(-1)": (_rowmean, (r(m, n),)),
        "casts f32 math": (_casts, (r(m, n), r(m, n))),
    }


def _median_call(f: Kernel, args: tuple, reps: int, clock: Callable[[], float]) -> float:
    for _ in range(2):
        f(*args)
    times = []
    for _ in range(reps):
        start = clock()
        f(*args)
        times.append(clock() - start)
    return statistics.median(times)


def _error(ours: torch.Tensor, eager: torch.Tensor) -> str:
    if torch.equal(ours, eager):
        return "yes"
    scale = eager.float().abs().max().item() or 1.0
    err = (ours.float() - eager.float()).abs().max().item() / scale
    return f"no ({err / torch.finfo(eager.dtype).eps:.2g})"


def measure(
    fn: Kernel,
    args: tuple,
    rounds: int,
    reps: int,
    clock: Callable[[], float],
    options: Any = None,
) -> dict[str, object]:
    """Fastest and slowest round's median seconds of each contender, ours (compiled with
    ``options``) against eager."""
    import torch._dynamo

    import torchstrata.runtime as tsr

    torch._dynamo.reset()
    tsr.reset()
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        ours = tsr.compile(fn, options=options)
        live = {"torchstrata": ours, "eager": fn, "torch.compile": torch.compile(fn)}
        outs = {name: f(*args) for name, f in live.items()}
    note = fallback_note(records)
    times: dict[str, list[float]] = {name: [] for name in live}
    order = list(live)
    for r in range(rounds):
        for name in order[r % len(order) :] + order[: r % len(order)]:
            times[name].append(_median_call(live[name], args, reps, clock))
    return {
        "times": {name: (min(t), max(t)) for name, t in times.items()},
        "equal": _error(outs["torchstrata"], outs["eager"]),
        "note": note,
    }


def main(argv: list[str] | None = None) -> int:
    """Print one row per dtype, thread count and kernel, and geomeans."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dtype", default="bf16,fp16", help="comma-separated: bf16, fp16")
    parser.add_argument("--threads", default="1", help="comma-separated torch thread counts")
    parser.add_argument("--only", default="", help="comma-separated kernel names")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per contender")
    parser.add_argument("--reps", type=int, default=5, help="timed calls per round")
    parser.add_argument(
        "--no-half-roundings",
        action="store_true",
        help="ours with InductorOptions(half_roundings=False): float32 through a kernel, "
        "as torch.compile computes (not eager's bits)",
    )
    args = parser.parse_args(argv)
    options = None
    if args.no_half_roundings:
        from torchstrata.core import CompileOptions, InductorOptions

        options = CompileOptions(inductor=InductorOptions(half_roundings=False))
    only = {name for name in args.only.split(",") if name}
    print(f"# command: python -m bench.half_kernels {' '.join(argv or sys.argv[1:])}")
    print(
        f"# commit {_commit()}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
        f"[{args.rows}, {args.cols}], fastest of {args.rounds} rounds of the median of "
        f"{args.reps} calls; spread: slowest round / fastest"
    )
    import torchstrata.inductor

    print(f"# torchstrata.inductor from {next(iter(torchstrata.inductor.__path__))}")
    print(
        "| dtype | threads | kernel | ours ms | eager ms | compile ms | x eager | x compile "
        "| spread ours/compile | equal (err/eps) | load 1/5/15 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for dname in args.dtype.split(","):
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            clock = time.process_time if threads == 1 else time.perf_counter
            ratios: dict[str, list[float]] = {"eager": [], "torch.compile": []}
            for name, (fn, inputs) in cases(DTYPES[dname], args.rows, args.cols).items():
                if only and name not in only:
                    continue
                res = measure(fn, inputs, args.rounds, args.reps, clock, options)
                t = res["times"]
                assert isinstance(t, dict)
                ours, eager, comp = t["torchstrata"], t["eager"], t["torch.compile"]
                ratios["eager"].append(eager[0] / ours[0])
                ratios["torch.compile"].append(comp[0] / ours[0])
                note = f" FELL BACK: {res['note']}" if res["note"] else ""
                print(
                    f"| {dname} | {threads} | {name} | {ours[0] * 1e3:.2f} | {eager[0] * 1e3:.2f} "
                    f"| {comp[0] * 1e3:.2f} | {eager[0] / ours[0]:.2f}x | {comp[0] / ours[0]:.2f}x "
                    f"| {ours[1] / ours[0]:.2f}/{comp[1] / comp[0]:.2f} | {res['equal']}{note} "
                    f"| {_load()} |",
                    flush=True,
                )
            if ratios["eager"]:
                geo = {k: math.exp(statistics.fmean(map(math.log, v))) for k, v in ratios.items()}
                print(
                    f"# geomean {dname}, {threads} thread(s): x eager {geo['eager']:.2f}, "
                    f"x torch.compile {geo['torch.compile']:.2f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
