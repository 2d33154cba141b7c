"""Smoke test of the benchmark harness: a tiny CPU run end to end, JSON checked."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

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
    wrong = [f"{r['workload']}: {r['status']}" for r in rows if r["status"].startswith("WRONG")]
    assert not wrong, wrong
    # only a right result is timed (a WRONG or failed one has no time and no speedup)
    untimed = [r for r in rows if r["status"] not in ("ok", "falls back to eager")]
    assert all(r["time_ms"] is None and not r.get("speedup_vs_eager") for r in untimed)


def test_demo_ratio_flags_one_bfloat16_element_far_off() -> None:
    """bench/demo_ratio.py's check is element by element: a small element 50x off is
    WRONG although the overall max error stays within eager's."""
    spec = importlib.util.spec_from_file_location("demo_ratio", REPO_ROOT / "bench/demo_ratio.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    check_result, demo = module.check_result, module.demo

    x = (2 * torch.randn(16, 128, generator=torch.Generator().manual_seed(0))).bfloat16()
    b = torch.randn(128, generator=torch.Generator().manual_seed(1)).bfloat16()
    reference = demo(x.double(), b.double())
    eager = demo(x, b)
    eager_error = (eager.double() - reference).abs()
    assert check_result(eager, torch.bfloat16, reference, eager_error) == ""
    assert check_result(reference.bfloat16(), torch.bfloat16, reference, eager_error) == ""
    wrong = eager.clone()
    at = divmod(int(reference.argmin()), reference.shape[1])
    wrong[at] *= 50
    assert (wrong.double() - reference).abs().max() <= 3 * eager_error.max()
    assert "1 elements off" in check_result(wrong, torch.bfloat16, reference, eager_error)
    assert "expected torch.bfloat16" in check_result(
        eager.float(), torch.bfloat16, reference, eager_error
    )


def test_timing_rounds_rotate_keep_the_fastest_round_and_drop_a_failing_step(
    monkeypatch: Any,
) -> None:
    monkeypatch.syspath_prepend(str(REPO_ROOT))
    from bench import runner
    from bench.rows import Row
    from bench.timing import TimingBudget
    from bench.workloads import Workload

    order: list[str] = []
    scripted = {"a": iter([3.0, 1.0, 2.0]), "b": iter([5.0, 4.0, 6.0]), "c": iter([1.0])}

    def fake_median(step: Any, device: Any, budget: Any) -> float:
        name = step()
        order.append(name)
        if name == "c" and order.count("c") == 2:
            raise RuntimeError("broke in round two")
        return next(scripted[name])

    monkeypatch.setattr(runner, "median_ms", fake_median)
    monkeypatch.setattr(runner, "peak_memory_mb", lambda step, device: None)
    contenders = [runner.Contender(Row("W", "w", name), (lambda name=name: name)) for name in "abc"]
    contenders.append(runner.Contender(Row("W", "w", "d", status="WRONG: off")))
    workload = Workload("W", "w", lambda: None)
    budget = TimingBudget.for_mode(quick=True, rounds=3)
    runner._time_in_rounds(contenders, workload, [], torch.device("cpu"), budget)
    # each round starts one later; the failed contender leaves the turns
    assert order == ["a", "b", "c", "b", "c", "a", "a", "b"]
    a, b, c, d = (x.row for x in contenders)
    assert (a.time_ms, b.time_ms) == (1.0, 4.0)
    assert a.note == "3 rounds, spread 3.00x" and b.note == "3 rounds, spread 1.50x"
    assert c.time_ms is None and "broke in round two" in c.status
    assert d.time_ms is None and d.status == "WRONG: off"
