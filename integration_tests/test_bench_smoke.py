"""Smoke test of the benchmark harness: a tiny CPU run end to end, JSON checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_bench_quick_cpu_run_writes_rows(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    command = [sys.executable, "-m", "bench", "--device", "cpu", "--quick", "--only", "K1,M1"]
    command += ["--no-cold", "--no-progress", "--compilers", "eager,torchstrata"]
    command += ["--json", str(out)]
    done = subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    workloads = {r["workload"] for r in rows}
    assert {"K1", "K1/mul", "M1/tiny", "M1/mlp"} <= workloads
    eager = [r for r in rows if r["compiler"] == "eager"]
    assert eager and all(r["status"] == "ok" and r["time_ms"] > 0 for r in eager)
    ours = [r for r in rows if r["compiler"] == "torchstrata"]
    assert len(ours) == len(eager)
    assert all(isinstance(r["status"], str) and r["status"] for r in ours)
