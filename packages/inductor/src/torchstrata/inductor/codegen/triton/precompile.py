"""Compile a Triton kernel's launch configurations on several threads before they are timed.

Autotuning on the first call times every candidate configuration, and each one is a
separate Triton compile (a fraction of a second: frontend, LLVM, ``ptxas``). Timed one
after another, the compiles dominate a deep model's cold start on a GPU. Before timing,
:func:`compile_configs` asks Triton for every configuration's binary at once through
``JITFunction.warmup`` (Triton's own dispatch path, specialised on the call's real
arguments, so the binaries are exactly those the timed launches then find in Triton's
in-memory cache). ``ptxas`` runs as a subprocess and much of LLVM's work runs outside
the GIL; on an H100 host, 24 configurations of one kernel compiled in 3.5 s on 16 threads
against 7.8 s one by one, and a 12-layer GPT training step's cold compile went from 31.3 s
to 22.6 s (``bench/results/2026-12-06-h100-s27-triton-compile-threads.txt``).

Two moments use it. When a kernel is built (before the graph's first call, while the
rest of the graph is still being lowered), :func:`submit_compiles` queues its
configurations on a process-wide pool with the arguments' dtypes standing in for the
tensors (Triton's ``warmup`` takes dtypes as 16-byte aligned pointers, as fresh torch
allocations are): every kernel of a graph compiles at once, not only one kernel's
configurations. The first call waits for them; an argument that turns out misaligned
specialises differently, and that configuration compiles then, as before. A kernel
built without them (a kernel loaded from a package) compiles its configurations with
the real arguments at its first call (:func:`compile_configs`).

Only compiles happen on the threads, never launches: configurations launch later, one by
one, on the caller's stream. A configuration that fails to compile here (out of shared
memory) is left for the timing loop, which skips it as before. Each thread enters the
kernel's compile scope itself (the verified binary cache is a context variable, and
threads do not inherit the caller's context).
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch

#: ``(jit function, arguments, grid, constants)``: one configuration's compile.
CompileJob = tuple[Any, tuple[Any, ...], tuple[int, ...], dict[str, Any]]

#: Most threads :func:`compile_configs` uses when the options leave it to the machine.
MAX_THREADS = 16


def default_threads() -> int:
    """One thread per CPU core available to this process, at most :data:`MAX_THREADS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, cores))


_POOLS: dict[int, concurrent.futures.ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(threads: int) -> concurrent.futures.ThreadPoolExecutor:
    """The process-wide pool of ``threads`` compile threads (made on first use)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(threads)
        if pool is None:
            pool = _POOLS[threads] = concurrent.futures.ThreadPoolExecutor(
                threads, "torchstrata-triton"
            )
        return pool


def scratch_tensors(
    sizes: tuple[int, int | None], device: torch.device
) -> tuple[torch.Tensor, ...]:
    """Scratch arguments as the launch appends them (float32 partials, int32 counters)."""
    floats, counters = sizes
    tensors: tuple[torch.Tensor, ...] = (torch.empty(floats, dtype=torch.float32, device=device),)
    if counters is not None:
        tensors += (torch.empty(counters, dtype=torch.int32, device=device),)
    return tensors


def compile_configs(
    jobs: Sequence[CompileJob],
    compile_scope: Callable[[], AbstractContextManager[Any]],
    threads: int,
) -> int:
    """Compile each job ``(jit_fn, args, grid, constants)`` (Triton's ``warmup``), on up to
    ``threads`` threads at once, each inside ``compile_scope()``; the number compiled.

    Failures are not raised: the caller's timed launch of that configuration meets the
    same error and handles it as it always has.
    """

    if threads <= 1 or len(jobs) <= 1:
        return sum(_compile_one(job, compile_scope, None) for job in jobs)
    futures = [_pool(threads).submit(_compile_one, job, compile_scope, None) for job in jobs]
    return sum(future.result() for future in futures)


def submit_compiles(
    jobs: Sequence[CompileJob],
    compile_scope: Callable[[], AbstractContextManager[Any]],
    threads: int,
    device: int | None,
) -> list[concurrent.futures.Future[bool]]:
    """Queue each job on the pool of ``threads`` threads (on CUDA device ``device``) and
    return at once; each future's result says whether its configuration compiled."""
    pool = _pool(max(1, threads))
    return [pool.submit(_compile_one, job, compile_scope, device) for job in jobs]


def _compile_one(
    job: CompileJob, compile_scope: Callable[[], AbstractContextManager[Any]], device: int | None
) -> bool:
    jit_fn, args, grid, constants = job
    try:
        with compile_scope():
            if device is not None:
                torch.cuda.set_device(device)  # this thread's own current device
            jit_fn.warmup(*args, grid=grid, **constants)
    except Exception:  # noqa: BLE001 - left for the timing loop (see above)
        return False
    return True
