"""Measure one workload with every compiler: check against eager first, then time.

Order per workload: eager runs once (its outputs and its error against the fp64
reference are the yardstick), then each compiler compiles, runs once and is judged;
the correct ones are then timed, in ``--rounds`` rounds of a rotating order (each keeps
its fastest round). A compiler that raises gets an ``error: ...`` status.
"""

from __future__ import annotations

import gc
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bench.compilers import (
    CompilerUnavailable,
    compile_with,
    describe_error,
    fallback_note,
    reset,
)
from bench.execution import clear_grads, grad_leaves, grad_mode, run_step, synchronize
from bench.progress import Progress
from bench.reference import fp64_reference, judge, max_errors
from bench.rows import Row, fill_relative
from bench.timing import TimingBudget, host_us_per_call, median_ms, peak_memory_mb
from bench.workloads import Case, DeviceProfile, Workload
from bench.workloads.spec import WrongResult


@dataclass
class Yardstick:
    """What every compiler is judged against: eager's tensors, the reference, eager's error."""

    eager: list[torch.Tensor | None]
    reference: list[torch.Tensor | None] | None
    eager_errors: list[float]
    longest_dim: int


def minimal_bytes(case: Case, produced: Sequence[torch.Tensor | None], train: bool) -> int:
    """Bytes a perfect kernel moves: inputs read once, outputs (and grads) written once.

    A training step is two passes: the backward, whose output gradients exist only after
    the forward, reads them and the floating inputs again."""
    tensors: list[Any] = [a for a in case.args if isinstance(a, torch.Tensor)]
    tensors += list(produced)
    if train and case.grad_outputs is not None:
        tensors += list(case.grad_outputs)
        tensors += [a for a in case.args if isinstance(a, torch.Tensor) and a.is_floating_point()]
    return sum(t.nbytes for t in tensors if isinstance(t, torch.Tensor))


def _reference_for(
    workload: Workload, case: Case, produced: list[torch.Tensor | None], fixed: Any
) -> list[torch.Tensor | None]:
    if workload.reference is None:
        return fixed
    tensors = [t for t in produced if t is not None]
    return list(workload.reference(case.args, tensors, case.grad_outputs))


def _first_call(
    name: str, case: Case, workload: Workload, leaves: list[torch.Tensor], device: torch.device
) -> tuple[Any, list[torch.Tensor | None], float, str | None]:
    """Compile and call once, recording warnings. Returns (callable, tensors, seconds, note)."""
    with warnings.catch_warnings(record=True) as records, grad_mode(workload.train):
        warnings.simplefilter("always")
        synchronize(device)
        start = time.perf_counter()
        compiled = compile_with(name, case.fn)
        produced = run_step(compiled, case, workload.train, leaves)
        synchronize(device)
        seconds = time.perf_counter() - start
    return compiled, produced, seconds, fallback_note(records)


@dataclass
class Contender:
    """A compiler's row and, once it was judged correct, the step that times it."""

    row: Row
    step: Callable[[], Any] | None = None


def _prepare(
    name: str,
    workload: Workload,
    case: Case,
    leaves: list[torch.Tensor],
    yardstick: Yardstick,
    device: torch.device,
) -> Contender:
    """Compile, call once and judge against the yardstick; only a correct one gets a step."""
    row = Row(workload.id, workload.name, name)
    try:
        compiled, produced, row.first_call_s, note = _first_call(
            name, case, workload, leaves, device
        )
    except CompilerUnavailable as exc:
        row.status = str(exc)
        return Contender(row)
    except Exception as exc:  # noqa: BLE001 - any compiler failure is a result to report
        row.status = describe_error(exc)
        return Contender(row)
    if note:
        row.status, row.note = "falls back to eager", note
    if name != "eager":
        try:
            reference = _reference_for(workload, case, produced, yardstick.reference)
        except WrongResult as exc:
            row.status = f"WRONG: {exc}"
            return Contender(row)
        verdict = judge(
            produced, yardstick.eager, reference, yardstick.eager_errors, yardstick.longest_dim
        )
        row.max_error = verdict.max_error
        if not verdict.ok:
            row.status = f"WRONG: {verdict.reason}"
            return Contender(row)
    else:
        row.max_error = max(yardstick.eager_errors, default=0.0)
    del produced

    def step() -> Any:
        return run_step(compiled, case, workload.train, leaves)

    return Contender(row, step)


def _time_in_rounds(
    contenders: Sequence[Contender],
    workload: Workload,
    leaves: list[torch.Tensor],
    device: torch.device,
    budget: TimingBudget,
) -> None:
    """Time every contender with a step, ``budget.rounds`` times in a rotating order.

    Each keeps its fastest round (median per call, and host time per call); with more
    than one round the note gives the spread, slowest round / fastest."""
    timed = [c for c in contenders if c.step is not None]
    medians: dict[int, list[float]] = {id(c): [] for c in timed}
    hosts: dict[int, list[float]] = {id(c): [] for c in timed}
    for turn in range(budget.rounds):
        shift = turn % max(len(timed), 1)
        for contender in timed[shift:] + timed[:shift]:
            if contender.step is None:
                continue  # failed in an earlier round
            try:
                with grad_mode(workload.train):
                    ms = median_ms(contender.step, device, budget)
                    medians[id(contender)].append(ms)
                    if workload.overhead:
                        host = host_us_per_call(contender.step, device, budget, ms)
                        hosts[id(contender)].append(host)
            except Exception as exc:  # noqa: BLE001
                contender.row.status, contender.step = describe_error(exc), None
    for contender in timed:
        row, times = contender.row, medians[id(contender)]
        if contender.step is None or not times:
            row.time_ms = None
            continue
        row.time_ms = min(times)
        row.overhead_us = min(hosts[id(contender)], default=None)
        if len(times) > 1:
            spread = f"{len(times)} rounds, spread {max(times) / min(times):.2f}x"
            row.note = f"{row.note}; {spread}".lstrip("; ")
        try:
            with grad_mode(workload.train):
                clear_grads(leaves)
                row.peak_mem_mb = peak_memory_mb(contender.step, device)
        except Exception as exc:  # noqa: BLE001
            row.status, row.time_ms = describe_error(exc), None


def _yardstick(workload: Workload, case: Case, leaves: list[torch.Tensor]) -> Yardstick:
    with grad_mode(workload.train):
        eager = run_step(case.fn, case, workload.train, leaves)
    fixed = None if workload.reference else fp64_reference(case, workload.train)
    reference = _reference_for(workload, case, eager, fixed)
    return Yardstick(eager, fixed, max_errors(eager, reference), longest_dim(case))


def longest_dim(case: Case) -> int:
    """The longest dimension of any tensor argument or parameter of ``case``."""
    tensors = [a for a in case.args if isinstance(a, torch.Tensor)]
    if isinstance(case.fn, torch.nn.Module):
        tensors += list(case.fn.parameters())
    return max((max(t.shape, default=1) for t in tensors), default=1)


def run_workload(
    workload: Workload,
    profile: DeviceProfile,
    compilers: Sequence[str],
    budget: TimingBudget,
    copy_gbps: float | None,
    progress: Progress,
) -> list[Row]:
    """Measure ``workload`` with each compiler; rows come back in ``compilers`` order."""
    progress.now(f"{workload.id}: eager + fp64 reference")
    try:
        case = workload.make()
        leaves = grad_leaves(case)
        yardstick = _yardstick(workload, case, leaves)
    except Exception as exc:  # noqa: BLE001 - a broken workload must not stop the suite
        for _ in compilers:
            progress.advance()
        status = f"eager failed: {describe_error(exc)}"
        return [Row(workload.id, workload.name, c, status=status) for c in compilers]
    contenders = []
    for name in compilers:
        progress.now(f"{workload.id}: {name}")
        contenders.append(_prepare(name, workload, case, leaves, yardstick, profile.device))
    progress.now(f"{workload.id}: timing ({budget.rounds} round(s))")
    _time_in_rounds(contenders, workload, leaves, profile.device, budget)
    rows = [c.row for c in contenders]
    for name in compilers:
        reset(name)
        progress.advance()
    if workload.memory_bound:
        nbytes = minimal_bytes(case, yardstick.eager, workload.train)
        fill_relative(rows, nbytes, copy_gbps)
    else:
        fill_relative(rows, None, None)
    del case, yardstick
    gc.collect()
    if profile.kind == "cuda":
        torch.cuda.empty_cache()
    return rows
