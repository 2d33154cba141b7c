"""``python -m bench``: run the suite and print/write the results.

Example: ``python -m bench --device cpu --only K1,K3 --no-cold``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from bench.cold import cold_first_call
from bench.compilers import COMPILERS, parse_compilers
from bench.progress import Progress
from bench.report import default_json_path, print_table, run_metadata, write_json
from bench.rows import Row, summarize
from bench.runner import run_workload
from bench.timing import TimingBudget, copy_ceiling_gbps
from bench.workloads import DeviceProfile, Workload, select_workloads
from bench.workloads.spec import DTYPES


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Eager vs torch.compile vs torchstrata on the perf.md workloads.",
    )
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    parser.add_argument("--device", choices=("cpu", "cuda"), default=default_device)
    parser.add_argument("--only", default="", help="comma list of ids: K1,K3/N=4096,M2/train")
    parser.add_argument("--quick", action="store_true", help="toy sizes, few repetitions")
    parser.add_argument(
        "--dtype", choices=sorted(DTYPES), help="working dtype (default: bf16 cuda, fp32 cpu)"
    )
    parser.add_argument("--json", type=Path, help="output file (default bench/results/...)")
    parser.add_argument("--no-cold", action="store_true", help="skip fresh-process compiles")
    parser.add_argument(
        "--compilers",
        default=",".join(COMPILERS),
        help="comma list from eager,inductor (alias torch.compile),torchstrata",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="timing rounds; contenders take turns, each keeps its fastest round",
    )
    parser.add_argument("--cold-timeout", type=float, default=900.0, help="seconds per process")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def _add_cold_compile(
    workload: Workload,
    rows: list[Row],
    profile: DeviceProfile,
    timeout: float,
    progress: Progress,
) -> None:
    """Fill ``cold_compile_s`` for each compiler that ran, from fresh processes."""
    ran = [r for r in rows if r.compiler != "eager" and r.timed]
    for _ in range(len(rows) - 1 - len(ran)):
        progress.advance()  # compilers that did not run have nothing to cold-compile
    if not ran:
        return
    progress.now(f"{workload.id}: cold eager")
    eager = cold_first_call(workload.id, "eager", profile, timeout)
    for row in ran:
        progress.now(f"{workload.id}: cold {row.compiler}")
        seconds = cold_first_call(workload.id, row.compiler, profile, timeout)
        if isinstance(seconds, str) or isinstance(eager, str):
            row.note = row.note + f"; cold: {seconds if isinstance(seconds, str) else eager}"
            row.note = row.note.lstrip("; ")
        else:
            row.cold_compile_s = seconds - eager
        progress.advance()


def main(argv: list[str] | None = None) -> int:
    """Run the suite; returns the process exit code."""
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: no CUDA device visible", file=sys.stderr)
        return 2
    profile = DeviceProfile(args.device, args.quick, args.dtype)
    try:
        compilers = parse_compilers(args.compilers)
        workloads = select_workloads(profile, [o for o in args.only.split(",") if o])
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        budget = TimingBudget.for_mode(args.quick, args.rounds)
    except ValueError as exc:
        print(f"--rounds: {exc}", file=sys.stderr)
        return 2
    cold_steps = 0 if args.no_cold else len(workloads) * (len(compilers) - 1)
    rows: list[Row] = []
    with Progress(len(workloads) * len(compilers) + cold_steps, not args.no_progress) as bar:
        bar.now("copy ceiling")
        copy_gbps = copy_ceiling_gbps(profile.device, budget, args.quick)
        bar.log(f"copy ceiling {copy_gbps:.1f} GB/s on {profile.kind}")
        for workload in workloads:
            measured = run_workload(workload, profile, compilers, budget, copy_gbps, bar)
            if not args.no_cold:
                _add_cold_compile(workload, measured, profile, args.cold_timeout, bar)
            for row in measured:
                bar.log(
                    f"{row.workload:<16} {row.compiler:<12} {row.status[:70]:<20} "
                    f"{'' if row.time_ms is None else f'{row.time_ms:.4f} ms'}"
                )
            rows += measured
    summary = summarize(rows)
    meta = run_metadata(profile.device, args.quick, argv)
    path = args.json or default_json_path(profile.kind, args.quick)
    write_json(path, meta, copy_gbps, rows, summary)
    title = f"{meta['device_name']} | torch {meta['torch']} | triton {meta['triton']}"
    print_table(rows, summary, copy_gbps, title)
    print(f"wrote {path}")
    return 0
