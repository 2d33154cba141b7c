"""The full OpInfo sweep: ``python -m integration_tests.opinfo.sweep [--ops a,b] [--max-samples N]``.

For every OpInfo in ``op_db`` and every dtype among float32, float64, float16, bfloat16,
int64 and bool that the op supports on CPU, the first ``--max-samples`` samples and their
non-contiguous variants run through :func:`~.harness.run_sample`. Prints a table: samples
decomposed / left extern / mismatched / skipped per op, then the totals, the ATen ops
left extern most often, the skip reasons and every mismatch.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import sys
import time
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from .harness import Outcome, run_sample

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.bool)
STATUSES = ("decomposed", "extern", "mismatch", "skip")


def samples(op: Any, dtype: torch.dtype, max_samples: int) -> Iterator[tuple[str, Any]]:
    """``(label, sample)``: the op's first samples, each also as a non-contiguous copy."""
    torch.manual_seed(0)
    try:
        generated = op.sample_inputs("cpu", dtype, requires_grad=False)
        for index, sample in enumerate(generated):
            if index >= max_samples:
                break
            yield f"{index}", sample
            yield f"{index}-noncontig", sample.noncontiguous()
    except Exception as error:  # noqa: BLE001 - a broken generator is a skip, counted
        yield f"sample_inputs failed: {type(error).__name__}", None


def run_op(op: Any, dtypes: Iterable[torch.dtype], max_samples: int) -> list[tuple[str, Outcome]]:
    """Every (dtype, sample) outcome of one OpInfo."""
    supported = op.supported_dtypes("cpu")
    results = []
    for dtype in dtypes:
        if dtype not in supported:
            continue
        for label, sample in samples(op, dtype, max_samples):
            where = f"{dtype}:{label}"
            if sample is None:
                results.append((where, Outcome("skip", label)))
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    outcome = run_sample(op, sample)
                except Exception as error:  # noqa: BLE001 - the harness itself must not stop
                    outcome = Outcome("mismatch", f"harness: {type(error).__name__}: {error}")
            results.append((where, outcome))
    return results


def op_label(op: Any) -> str:
    """``name`` or ``name.variant``."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def report(per_op: dict[str, list[tuple[str, Outcome]]], out: Any = sys.stdout) -> dict[str, int]:
    """Print the table; return the totals."""
    totals: collections.Counter[str] = collections.Counter()
    extern_ops: collections.Counter[str] = collections.Counter()
    skips: collections.Counter[str] = collections.Counter()
    mismatches, untraced = [], []
    print(f"{'op':40} {'samples':>8} " + " ".join(f"{s:>10}" for s in STATUSES), file=out)
    for name, results in per_op.items():
        counts = collections.Counter(outcome.status for _, outcome in results)
        totals.update(counts)
        print(
            f"{name:40} {len(results):8} " + " ".join(f"{counts[s]:10}" for s in STATUSES), file=out
        )
        for where, outcome in results:
            extern_ops.update(outcome.extern)
            if outcome.status == "skip":
                skips[outcome.reason] += 1
            if outcome.status == "mismatch":
                mismatches.append(f"{name} [{where}]: {outcome.reason}")
        if results and all(o.status == "skip" and o.reason.startswith("trace") for _, o in results):
            untraced.append(name)
    ops_with_samples = sum(1 for results in per_op.values() if results)
    fully = sum(
        1
        for results in per_op.values()
        if results
        and all(o.status == "decomposed" for _, o in results if o.status != "skip")
        and any(o.status == "decomposed" for _, o in results)
    )
    print("", file=out)
    print(
        f"ops: {len(per_op)} ({ops_with_samples} with samples, {fully} fully decomposed)", file=out
    )
    print(
        f"samples: {sum(totals.values())}  " + "  ".join(f"{s}: {totals[s]}" for s in STATUSES),
        file=out,
    )
    print("\nATen ops left extern (samples):", file=out)
    for name, count in extern_ops.most_common(40):
        print(f"  {count:6}  {name}", file=out)
    print("\nskip reasons (samples):", file=out)
    for reason, count in skips.most_common():
        print(f"  {count:6}  {reason}", file=out)
    print(
        f"\nops that failed to trace on every sample ({len(untraced)}): {', '.join(untraced)}",
        file=out,
    )
    print(f"\nmismatches ({len(mismatches)}):", file=out)
    for line in mismatches:
        print(f"  {line}", file=out)
    return dict(totals)


_SWEEP_OPS: list[Any] = []


def _run_indexed(item: tuple[int, int]) -> list[tuple[str, Outcome]]:
    index, max_samples = item
    return run_op(_SWEEP_OPS[index], DTYPES, max_samples)


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; exit status 1 if anything mismatched."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--max-samples", type=int, default=2, help="samples per op and dtype")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    args = parser.parse_args(argv)
    from torch.testing._internal.common_methods_invocations import op_db

    wanted = set(args.ops.split(",")) if args.ops else None
    ops = [op for op in op_db if wanted is None or op.name in wanted or op_label(op) in wanted]
    start = time.monotonic()
    global _SWEEP_OPS
    _SWEEP_OPS = ops
    work = [(index, args.max_samples) for index in range(len(ops))]
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs, maxtasksperchild=20) as pool:
            results = pool.map(_run_indexed, work, chunksize=1)
    else:
        results = [_run_indexed(item) for item in work]
    per_op = {op_label(op): result for op, result in zip(ops, results)}
    totals = report(per_op)
    print(f"\n{time.monotonic() - start:.0f} s", file=sys.stdout)
    return 1 if totals.get("mismatch") else 0


if __name__ == "__main__":
    sys.exit(main())
