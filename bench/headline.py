"""Render the headline markdown table of a results JSON file (for bench/README.md).

python -m bench.headline bench/results/2026-11-30-h200.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def headline(results: dict[str, Any]) -> str:
    """One row per workload: torchstrata's status, % of copy, speedups; then the summary."""
    meta = results["meta"]
    lines = [
        f"{meta['device_name']} · torch {meta['torch']} · Triton {meta['triton']} · "
        f"{meta['date'][:10]} · copy ceiling {results['copy_ceiling_gbps']:.0f} GB/s",
        "",
        "| workload | torchstrata | median | % copy (ours / torch.compile) | x eager | x torch.compile |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    rows: dict[str, dict[str, Any]] = {}
    for row in results["rows"]:
        rows.setdefault(row["workload"], {})[row["compiler"]] = row
    for workload, by_compiler in rows.items():
        ours, theirs = by_compiler.get("torchstrata"), by_compiler.get("inductor", {})
        if ours is None:
            continue
        copy = (
            f"{_fmt(ours.get('pct_copy'), '{:.0f}%')} / {_fmt(theirs.get('pct_copy'), '{:.0f}%')}"
        )
        lines.append(
            f"| {workload} | {ours['status']} | {ours['time_ms']:.3f} ms | {copy} | "
            f"{_fmt(ours.get('speedup_vs_eager'), '{:.2f}x')} | "
            f"{_fmt(ours.get('ratio_vs_inductor'), '{:.2f}x')} |"
        )
    summary = results["summary"].get("torchstrata", {})
    lines += [
        "",
        f"torchstrata geomean vs eager: kernels {summary.get('geomean_speedup_kernels', 0):.2f}x, "
        f"models {summary.get('geomean_speedup_models', 0):.2f}x; vs torch.compile: geomean "
        f"{summary.get('geomean_vs_inductor') or 0:.2f}x, worst {summary.get('worst_vs_inductor') or 0:.2f}x; "
        f"wrong {summary.get('wrong', 0)}, failed {summary.get('failed', 0)}, "
        f"fell back {summary.get('fell_back', 0)}.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(headline(json.loads(Path(sys.argv[1]).read_text())))
