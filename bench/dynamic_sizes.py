"""Dynamic vs static shapes: compiles, first-call time over many sizes, and steady per-call
time, side by side in one run (issue 33, decision 0213).

Workloads (CPU, fp32, no gradients):

* ``softmax_gelu``: ``softmax(gelu(x @ w), -1) * 2``, ``w [256, 256]``, 16 row counts of
  ``x`` (17 to 1000);
* ``block``: the bench GPT's pre-LN transformer block (width 64, 4 heads, batch 1)
  over 32 sequence lengths (9 to 133);
* ``decode``: a KV-cache decode loop, one step per call: the new key and value
  concatenated to caches of 16 to 47 rows (2 heads of 32), attention of one query.

Contenders: eager; torchstrata ``dynamic=None`` (static for the first size, one symbolic
entry from the second, lowered per size); torchstrata ``dynamic=False`` with the
recompile limit raised to the number of sizes (one static compile per size, as before
issue 33); ``torch.compile(dynamic=True)`` (Inductor, one symbolic graph). For each:
the entries (graphs) it compiled, the total time of the first call at every size
(compiles included, caches cold; wall clock, since compilers run in subprocesses), and the steady
per-call time: the median over rounds of one pass over all sizes, divided by the
number of sizes, contenders in rotating order. Every first call is checked against
eager; a contender that warns it fell back to eager says so in its row. Each compiler
first compiles a small function once (its one-time start is not the first workload's).

    python -m bench.dynamic_sizes --clock cpu

``--clock cpu`` times the steady calls by this process's CPU time (steadier on a
machine whose cores other processes share; one torch thread).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
import torch.nn.functional as F

from bench.compile_scaling import _commit, _load
from bench.compilers import fallback_note
from bench.workloads.nets.gpt import Block, GPTConfig

CONTENDERS = ("eager", "torchstrata dynamic", "torchstrata static", "torch.compile dynamic")


@attrs.frozen
class Workload:
    """A function and the argument tuples of each size it is called with."""

    name: str
    fn: Callable[..., Any]
    calls: Sequence[tuple[Any, ...]]
    sizes: str


def softmax_gelu(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The issue's program."""
    return torch.softmax(F.gelu(x @ w), -1) * 2


def decode_step(k_cache, v_cache, q, k, v):
    """One decode step: append this token's key and value, attend with its query."""
    keys = torch.cat([k_cache, k], dim=1)
    values = torch.cat([v_cache, v], dim=1)
    weights = torch.softmax(q @ keys.transpose(1, 2) / math.sqrt(q.shape[-1]), -1)
    return weights @ values, keys, values


def workloads(quick: bool) -> list[Workload]:
    """The three workloads (``quick``: a few small sizes, to check the harness)."""
    torch.manual_seed(0)
    w = torch.randn(256, 256)
    rows = (17, 64, 255, 1000, 33, 100, 129, 500, 48, 77, 200, 301, 640, 23, 999, 400)
    lengths = range(9, 134, 4)
    steps = range(16, 48)
    if quick:
        rows, lengths, steps = rows[:3], range(9, 20, 4), range(16, 19)
    block = Block(GPTConfig(1, 4, 64, 256, 256)).eval().requires_grad_(False)
    return [
        Workload("softmax_gelu", softmax_gelu, [(torch.randn(n, 256), w) for n in rows],
                 f"{len(rows)} row counts {min(rows)}-{max(rows)}"),
        Workload("block", block, [(torch.randn(1, t, 64),) for t in lengths],
                 f"{len(lengths)} lengths {min(lengths)}-{max(lengths)}"),
        Workload(
            "decode",
            decode_step,
            [
                (torch.randn(2, t, 32), torch.randn(2, t, 32), *torch.randn(3, 2, 1, 32))
                for t in steps
            ],
            f"{len(steps)} cache lengths {min(steps)}-{max(steps)}",
        ),
    ]  # fmt: skip


def _compiled(name: str, fn: Callable[..., Any], sizes: int, cache_dir: str) -> Any:
    if name == "eager":
        return fn
    if name == "torch.compile dynamic":
        return torch.compile(fn, dynamic=True)
    import torchstrata.runtime as tsr

    options: dict[str, Any] = {"cache_dir": cache_dir}
    if name == "torchstrata static":
        options["recompile_limit"] = sizes
        return tsr.compile(fn, dynamic=False, options=options)
    return tsr.compile(fn, options=options)


def _entries(name: str, compiled: Any) -> str:
    if name == "eager":
        return "-"
    if name == "torch.compile dynamic":
        from torch._dynamo.utils import counters

        return str(counters["stats"]["unique_graphs"])
    forward = getattr(compiled, "compiled_forward", compiled)
    return str(len(forward.cache))


def _same(got: Any, want: Any) -> None:
    if isinstance(want, tuple):
        for a, b in zip(got, want, strict=True):
            _same(a, b)
    else:
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def first_calls(name: str, workload: Workload) -> tuple[Any, dict[str, str | float]]:
    """Compile afresh and call once at every size (checked against eager): the callable
    and its row (entries, first-call seconds, status)."""
    import torchstrata.runtime as tsr

    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    row: dict[str, str | float] = {}
    # cold compiles for both: a fresh kernel cache directory and no compiled-graph cache
    # for torchstrata, Inductor's on-disk caches off (an earlier run would serve them)
    from torch._inductor import config as inductor_config

    with (
        tempfile.TemporaryDirectory() as cache_dir,
        tsr.graph_cache_suspended(),
        inductor_config.patch(force_disable_caches=True),
    ):
        compiled = _compiled(name, workload.fn, len(workload.calls), cache_dir)
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            start = time.perf_counter()
            try:
                for args in workload.calls:
                    _same(compiled(*args), workload.fn(*args))
                row["status"] = "ok"
            except Exception as error:  # noqa: BLE001 - reported as the row's status
                row["status"] = f"error: {type(error).__name__}: {error}"[:120]
            row["first"] = time.perf_counter() - start
    note = fallback_note(records) if name != "eager" else None
    if note is not None:
        row["status"] = f"falls back to eager: {note}"[:120]
    row["entries"] = _entries(name, compiled)
    return compiled, row


def warm_up(names: Sequence[str]) -> None:
    """Compile and call a small function with each compiler once, so that the first
    workload's first calls do not pay a compiler's one-time start (imports, headers)."""

    def tiny(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 2 + 1, -1)

    for name in names:
        first_calls(
            name, Workload("warm-up", tiny, [(torch.randn(5, 3),), (torch.randn(6, 3),)], "")
        )


def steady(
    live: dict[str, Any], workload: Workload, rounds: int, clock: Callable[[], float]
) -> dict[str, float]:
    """Median seconds per call of each contender over passes through all sizes."""
    times: dict[str, list[float]] = {name: [] for name in live}
    order = list(live)
    for r in range(rounds):
        for name in order[r % len(order) :] + order[: r % len(order)]:
            fn = live[name]
            start = clock()
            for args in workload.calls:
                fn(*args)
            times[name].append((clock() - start) / len(workload.calls))
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    """Print one row per workload and contender."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", default="", help="comma-separated workload names")
    parser.add_argument("--rounds", type=int, default=7, help="steady passes per contender")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="steady calls by wall time or this process's CPU time",
    )
    parser.add_argument("--quick", action="store_true", help="a few small sizes")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    args = parser.parse_args(argv)  # fmt: skip
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    names = [n for n in CONTENDERS if not (args.no_compile and n.startswith("torch.compile"))]
    print(f"# command: python -m bench.dynamic_sizes {' '.join(argv or sys.argv[1:])}")
    print(
        f"# commit {_commit()}, torch {torch.__version__}, cpu, {os.cpu_count()} CPUs, "
        f"{torch.get_num_threads()} threads; first calls by wall time; steady: median of "
        f"{args.rounds} passes over all sizes ({'process CPU' if args.clock == 'cpu' else 'wall'})"
    )
    print("# x eager / x static: their steady time / this one (> 1: faster)")
    print("| workload | sizes | contender | entries | first calls s | steady us/call "
          "| x eager | x static | status | load avg 1/5/15 |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    only = {part for part in args.only.split(",") if part}
    warm_up(names)
    for workload in workloads(args.quick):
        if only and workload.name not in only:
            continue
        live, rows = {}, {}
        for name in names:
            compiled, rows[name] = first_calls(name, workload)
            if rows[name]["status"] == "ok":
                live[name] = compiled
        result = steady(live, workload, args.rounds, clock)
        eager, static = result.get("eager"), result.get("torchstrata static")
        load = _load()
        for name in names:
            row, value = rows[name], result.get(name)
            per_call = f"{value * 1e6:.1f}" if value else "-"
            vs_eager = f"{eager / value:.2f}x" if eager and value else "-"
            vs_static = f"{static / value:.2f}x" if static and value else "-"
            print(
                f"| {workload.name} | {workload.sizes} | {name} | {row['entries']} "
                f"| {row['first']:.2f} | {per_call} | {vs_eager} | {vs_static} "
                f"| {row['status']} | {load} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
