"""One result row per (workload, compiler), the metrics derived across rows, and summaries."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

OK_STATUSES = ("ok", "falls back to eager")


@dataclass
class Row:
    """Everything measured for one compiler on one workload (``None`` = not measured)."""

    workload: str
    name: str
    compiler: str
    status: str = "ok"
    time_ms: float | None = None
    gbps: float | None = None
    pct_copy: float | None = None
    speedup_vs_eager: float | None = None
    ratio_vs_inductor: float | None = None
    cold_compile_s: float | None = None
    first_call_s: float | None = None
    overhead_us: float | None = None
    peak_mem_mb: float | None = None
    max_error: float | None = None
    note: str = ""

    @property
    def timed(self) -> bool:
        """Whether this row has a trustworthy time (checked correct and measured)."""
        return self.status in OK_STATUSES and self.time_ms is not None


def fill_relative(rows: list[Row], bytes_moved: int | None, copy_gbps: float | None) -> None:
    """Derive GB/s, % of copy, speedup over eager and ratio against torch.compile in place."""
    by_compiler = {r.compiler: r for r in rows}
    eager, inductor = by_compiler.get("eager"), by_compiler.get("inductor")
    for row in rows:
        if not row.timed or row.time_ms is None:
            continue
        if bytes_moved:
            row.gbps = bytes_moved / (row.time_ms * 1e-3) / 1e9
            if copy_gbps:
                row.pct_copy = 100.0 * row.gbps / copy_gbps
        if eager is not None and eager.timed and eager.time_ms:
            row.speedup_vs_eager = eager.time_ms / row.time_ms
        if (
            row.compiler == "torchstrata"
            and inductor is not None
            and inductor.timed
            and inductor.time_ms
        ):
            row.ratio_vs_inductor = inductor.time_ms / row.time_ms


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean, or ``None`` for no values."""
    logs = [math.log(v) for v in values if v and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def summarize(rows: list[Row]) -> dict[str, dict[str, float | int | None]]:
    """Per compiler: geomean speedup over eager for K, M and all, counts of rows by outcome,
    and (for torchstrata) geomean and worst ratio against torch.compile.

    Only rows with status ``ok`` enter the geomeans: a fallback runs eager code.
    """
    summary: dict[str, dict[str, float | int | None]] = {}
    for compiler in dict.fromkeys(r.compiler for r in rows):
        mine = [r for r in rows if r.compiler == compiler]
        entry: dict[str, float | int | None] = {}
        for group, label in (("K", "kernels"), ("M", "models"), ("", "all")):
            speedups = [
                r.speedup_vs_eager
                for r in mine
                if r.workload.startswith(group) and r.status == "ok"
            ]
            entry[f"geomean_speedup_{label}"] = geomean(s for s in speedups if s)
        ratios = [r.ratio_vs_inductor for r in mine if r.ratio_vs_inductor and r.status == "ok"]
        entry["geomean_vs_inductor"] = geomean(ratios) if compiler != "inductor" else None
        entry["worst_vs_inductor"] = min(ratios) if ratios and compiler != "inductor" else None
        entry["timed"] = sum(r.timed for r in mine)
        entry["fell_back"] = sum(r.status == "falls back to eager" for r in mine)
        entry["wrong"] = sum(r.status.startswith("WRONG") for r in mine)
        entry["failed"] = sum(not r.timed and not r.status.startswith("WRONG") for r in mine)
        summary[compiler] = entry
    return summary
