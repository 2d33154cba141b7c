"""Timers: device time per call, host time per call, the copy ceiling, peak memory.

CUDA uses ``triton.testing.do_bench`` (median, L2 flushed before every run).
CPU uses ``time.perf_counter`` around single calls after a warm-up; inputs are not
rotated, so CPU shapes that fit in the last-level cache can beat the copy ceiling.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class TimingBudget:
    """How hard to try. ``quick`` budgets are for smoke tests, not for numbers."""

    cpu_warmup: int
    cpu_max_reps: int
    cpu_min_reps: int
    cpu_seconds: float
    cuda_rep_ms: float
    overhead_calls: int
    overhead_batches: int
    #: Timing rounds per workload; contenders take turns in a rotating order and each
    #: keeps its fastest round, so a burst of load or a clock change falls on all of them.
    rounds: int = 1

    @classmethod
    def for_mode(cls, quick: bool, rounds: int = 1) -> TimingBudget:
        """The default budget, or a tiny one for ``--quick``; ``rounds`` timing rounds."""
        if rounds < 1:
            raise ValueError(f"rounds must be at least 1, not {rounds}")
        if quick:
            return cls(1, 3, 1, 0.5, 20.0, 20, 3, rounds)
        return cls(3, 50, 5, 3.0, 200.0, 200, 11, rounds)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn: Callable[[], Any], device: torch.device, budget: TimingBudget) -> float:
    """Median wall time of one call of ``fn`` in milliseconds."""
    if device.type == "cuda":
        from triton.testing import do_bench

        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        estimate_ms = (time.perf_counter() - start) * 1e3
        # do_bench sizes its repetitions from ``rep``; ask for at least ~10 runs.
        rep = min(max(budget.cuda_rep_ms, 10 * estimate_ms), 5000.0)
        return float(do_bench(fn, warmup=25, rep=rep, return_mode="median"))
    for _ in range(budget.cpu_warmup):
        fn()
    samples: list[float] = []
    deadline = time.perf_counter() + budget.cpu_seconds
    while len(samples) < budget.cpu_max_reps:
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
        if len(samples) >= budget.cpu_min_reps and time.perf_counter() > deadline:
            break
    return statistics.median(samples)


def host_us_per_call(
    fn: Callable[[], Any], device: torch.device, budget: TimingBudget, median: float
) -> float:
    """Median over batches of back-to-back calls (device synced per batch), in µs per call.

    For tiny graphs this is the per-call overhead: guards, wrappers and launches.
    ``median`` (ms, from :func:`median_ms`) caps a batch at about 0.2 s.
    """
    calls = max(5, min(budget.overhead_calls, int(200.0 / max(median, 1e-3))))
    for _ in range(calls // 4 + 1):
        fn()
    _sync(device)
    per_call = []
    for _ in range(budget.overhead_batches):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        _sync(device)
        per_call.append((time.perf_counter() - start) * 1e6 / calls)
    return statistics.median(per_call)


def copy_ceiling_gbps(device: torch.device, budget: TimingBudget, quick: bool) -> float:
    """Achieved GB/s of a large same-device ``copy_`` (bytes read + written)."""
    numel = 2**20 if quick else (2**29 if device.type == "cuda" else 2**24)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    src = torch.randn(numel, device=device).to(dtype)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), device, budget)
    return 2 * src.nbytes / (ms * 1e-3) / 1e9


def peak_memory_mb(fn: Callable[[], Any], device: torch.device) -> float | None:
    """Extra device memory one call needs at its peak (MB above what was allocated before).

    ``None`` on CPU: the caching allocator statistics exist only for CUDA.
    """
    if device.type != "cuda":
        return None
    gc.collect()
    _sync(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    result = fn()
    _sync(device)
    peak = torch.cuda.max_memory_allocated(device)
    del result
    return (peak - before) / 2**20
