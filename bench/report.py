"""Run metadata, the results table (rich, or plain text) and the JSON file."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from bench.compilers import LABELS
from bench.rows import Row

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=RESULTS_DIR.parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def run_metadata(device: torch.device, quick: bool, argv: list[str]) -> dict[str, Any]:
    """Date, versions and machine description recorded with every result file."""
    cuda = device.type == "cuda"
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if cuda else _cpu_name(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "torchstrata_runtime": _version("torchstrata-runtime"),
        "cuda": torch.version.cuda if cuda else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "git_commit": _git_commit(),
        "quick": quick,
        "command": " ".join([Path(sys.executable).name, "-m", "bench", *argv]),
    }


def default_json_path(device: str, quick: bool) -> Path:
    """``bench/results/<date>-<device>[-quick].json``."""
    day = dt.date.today().isoformat()
    return RESULTS_DIR / f"{day}-{device}{'-quick' if quick else ''}.json"


def write_json(
    path: Path,
    meta: dict[str, Any],
    copy_gbps: float | None,
    rows: list[Row],
    summary: dict[str, Any],
) -> None:
    """Write the run as JSON: metadata, copy ceiling, one object per row, summary."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "meta": meta,
        "copy_ceiling_gbps": copy_gbps,
        "rows": [dataclasses.asdict(r) for r in rows],
        "summary": summary,
    }
    path.write_text(json.dumps(document, indent=1) + "\n")


def _num(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _time(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms * 1e3:.1f} µs" if ms < 1 else f"{ms:.3f} ms" if ms < 100 else f"{ms:.1f} ms"


COLUMNS = (
    "workload",
    "compiler",
    "status",
    "median",
    "GB/s",
    "% copy",
    "x eager",
    "x compile",
    "cold s",
    "µs/call",
    "peak MB",
)


def table_cells(row: Row) -> list[str]:
    """The displayed cells of one row, in :data:`COLUMNS` order."""
    return [
        row.workload,
        LABELS.get(row.compiler, row.compiler),
        row.status if len(row.status) <= 60 else row.status[:57] + "...",
        _time(row.time_ms),
        _num(row.gbps, ".0f"),
        _num(row.pct_copy, ".0f", "%"),
        _num(row.speedup_vs_eager, ".2f", "x"),
        _num(row.ratio_vs_inductor, ".2f", "x") if row.compiler == "torchstrata" else "",
        _num(row.cold_compile_s, ".2f"),
        _num(row.overhead_us, ".1f"),
        _num(row.peak_mem_mb, ".0f"),
    ]


def _summary_lines(summary: dict[str, Any], copy_gbps: float | None) -> list[str]:
    lines = [f"copy ceiling: {_num(copy_gbps, '.1f')} GB/s"]
    for compiler, entry in summary.items():
        if compiler == "eager":
            continue
        parts = [
            f"geomean x eager: K {_num(entry['geomean_speedup_kernels'], '.2f')}",
            f"M {_num(entry['geomean_speedup_models'], '.2f')}",
            f"all {_num(entry['geomean_speedup_all'], '.2f')}",
        ]
        if entry.get("geomean_vs_inductor"):
            parts.append(
                f"vs torch.compile geomean {entry['geomean_vs_inductor']:.2f}"
                f" worst {entry['worst_vs_inductor']:.2f}"
            )
        parts.append(
            f"timed {entry['timed']} (fell back {entry['fell_back']}),"
            f" wrong {entry['wrong']}, failed {entry['failed']}"
        )
        lines.append(f"{LABELS.get(compiler, compiler)}: " + "; ".join(parts))
    return lines


def print_table(
    rows: list[Row], summary: dict[str, Any], copy_gbps: float | None, title: str
) -> None:
    """Print the results table and summary to stdout (rich when installed)."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        _print_plain(rows, summary, copy_gbps, title)
        return
    table = Table(title=title, title_justify="left")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in COLUMNS[:3] else "right")
    previous = None
    for row in rows:
        cells = table_cells(row)
        if row.workload == previous:
            cells[0] = ""
        elif previous is not None:
            table.add_section()
        style = "red" if row.status.startswith(("WRONG", "error")) else None
        table.add_row(*cells, style=style)
        previous = row.workload
    console = Console(width=max(160, Console().width))
    console.print(table, markup=False)
    for line in _summary_lines(summary, copy_gbps):
        console.print(line, markup=False, highlight=False)


def _print_plain(
    rows: list[Row], summary: dict[str, Any], copy_gbps: float | None, title: str
) -> None:
    cells = [list(COLUMNS)] + [table_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    print(title)
    for cell_row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(cell_row, widths, strict=True)).rstrip())
    for line in _summary_lines(summary, copy_gbps):
        print(line)
