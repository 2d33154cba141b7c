"""Smoke test of ``bench/memory_training.py``: a tiny CPU run prints and writes its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_memory_bench_tiny_cpu_run(tmp_path: Path) -> None:
    out = tmp_path / "memory.json"
    command = [sys.executable, "-m", "bench.memory_training", "--device", "cpu"]
    command += ["--size", "1", "16", "32", "2", "--codegen", "eager", "--json", str(out)]
    done = subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "peak" in done.stdout and "saved for backward" in done.stdout
    results = json.loads(out.read_text())
    assert results["graphs"] == 1 and results["graph_breaks"] == 0
    assert results["fallback_warnings"] == []
    saved = results["saved"]
    assert 0 < saved["ours_saved_activations"] <= saved["eager_saved_activations"]
