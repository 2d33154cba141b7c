"""``python -m bench.dynamic_sizes``'s command line: contenders picked by short name, rows
printed as each contender's first calls end, and the budget that skips later turns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
#: the quickest workload, its three quick sizes
QUICK = ["--quick", "--only", "softmax_gelu", "--clock", "cpu", "--rounds", "1"]
STATIC = "torchstrata static"


@pytest.fixture
def contenders(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``bench.dynamic_contenders`` (the repository root on the path)."""
    monkeypatch.syspath_prepend(str(REPO_ROOT))
    import bench.dynamic_contenders

    return bench.dynamic_contenders


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "bench.dynamic_sizes", *QUICK, *args]
    return subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False
    )


def _rows(stdout: str) -> list[list[str]]:
    """The table rows of ``stdout`` (headers and separators left out), as cells."""
    lines = [line for line in stdout.splitlines() if line.startswith("| softmax_gelu |")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_an_unknown_contender_is_an_error_naming_the_valid_ones(
    contenders: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.dynamic_sizes import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--contenders", "dynamic,fastest"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "'fastest'" in error
    assert all(short in error for short in contenders.SHORT_NAMES)


def test_short_names_select_contenders_in_the_bench_order_once(contenders: ModuleType) -> None:
    assert contenders.select_contenders("static,eager,static") == ["eager", STATIC]
    with pytest.raises(ValueError, match="valid: eager, dynamic"):
        contenders.select_contenders("")


def test_budget_skips_only_turns_starting_after_it(contenders: ModuleType) -> None:
    Budget = contenders.Budget
    now = [0.0]
    budget = Budget(5.0, clock=lambda: now[0])
    assert budget.spent() is None
    now[0] = 4.9
    assert budget.spent() is None
    now[0] = 5.2
    assert budget.spent() == "skipped: budget 5 s spent (5 s in)"
    assert Budget(None, clock=lambda: 1e9).spent() is None


def test_only_the_named_contenders_run_and_are_timed() -> None:
    done = _bench("--contenders", "static,eager")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _rows(done.stdout)
    first = [row for row in rows if len(row) == 9]
    steady = [row for row in rows if len(row) == 8]
    assert [row[2] for row in first] == ["eager", STATIC]
    assert [row[1] for row in steady] == ["eager", STATIC]
    assert all(row[7] == "ok" for row in first), first
    # static against itself, eager against static: both measured in the one run
    assert steady[1][4] == "1.00x" and float(steady[0][2]) > 0
    assert float(steady[0][4].rstrip("x")) > 0


def test_a_zero_budget_prints_skipped_rows_and_times_nothing() -> None:
    done = _bench("--contenders", "eager,static", "--budget", "0")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _rows(done.stdout)
    assert len(rows) == 4
    assert all(row[-2].startswith("skipped: budget 0 s spent") for row in rows), rows
    assert all(cell == "-" for row in rows if len(row) == 8 for cell in row[2:6])


def test_a_first_calls_row_is_out_before_the_next_contender_ends() -> None:
    # killed (as a timeout would) once eager's row is read, during the dynamic compile:
    # a row held back until the end would never have been read
    command = [sys.executable, "-m", "bench.dynamic_sizes", *QUICK]
    command += ["--contenders", "eager,dynamic"]
    # stdout a pipe, block-buffered unless the bench flushes
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    seen: list[str] = []
    try:
        for line in process.stdout:
            seen.append(line)
            if line.startswith("| softmax_gelu | 3 row counts 17-255 | eager |"):
                break
        process.kill()
        seen += process.stdout.readlines()
    finally:
        process.kill()
        process.wait(timeout=60)
    contenders = [row[2] for row in _rows("".join(seen))]
    assert contenders == ["eager"], seen
    assert _rows("".join(seen))[0][7] == "ok", seen
    assert not any("steady us/call" in line for line in seen), seen
