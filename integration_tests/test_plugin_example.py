"""The example plugin package, installed for real, is discovered through its entry point.

The package is pip-installed into a temporary target directory and used from a fresh
interpreter with that directory on PYTHONPATH, so discovery goes through
``importlib.metadata`` exactly as for a user's installation.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_SOURCE = ROOT / "examples" / "strata_example_plugin"

#: One fresh interpreter runs the three phases and prints ``<phase>: ok`` or
#: ``<phase>: failed`` (the traceback on stderr) for each, so that each test below reads
#: its own phases: a compile with the plugin blocked, one with it active, then discovery
#: through the plugin manager. The blocked compile comes first, in an interpreter that has
#: not loaded the plugin yet, as in a process of its own; one interpreter instead of three
#: saves two torch imports and two cold compile pipelines (about 15 s of CI per torch
#: version).
SCRIPT = textwrap.dedent(
    """
    import sys
    import traceback
    import warnings

    import torch
    import torch.nn.functional as F

    import torchstrata.runtime as rt
    from torchstrata.core import CompileOptions, create_plugin_manager


    def compile_and_check(counter_file, blocked):
        options = CompileOptions(
            blocked_plugins={"example-counter"} if blocked else (),
            stage_options={"example-counter": {"counter_file": counter_file}},
        )
        fn = lambda x, b: torch.softmax(F.gelu(x + b), -1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = rt.compile(fn, options=options)
            x, b = torch.randn(64, 128), torch.randn(128)
            torch.testing.assert_close(compiled(x, b), fn(x, b))
            torch.testing.assert_close(compiled(x, b), fn(x, b))
        names = sorted({w.category.__name__ for w in caught})
        print("warnings", "blocked" if blocked else "active", ",".join(names))


    def discover():
        manager = create_plugin_manager()
        assert manager.get_plugin("example-counter") is not None, manager.list_name_plugin()
        passes = manager.hook.torchstrata_graph_passes(
            stage="post_decomp", options=CompileOptions()
        )
        assert [p.name for group in passes for p in group] == ["count-ops"], passes
        blocked = create_plugin_manager(blocked={"example-counter"})
        assert blocked.get_plugin("example-counter") is None


    blocked_counter, active_counter = sys.argv[1], sys.argv[2]
    phases = {
        "blocked": lambda: compile_and_check(blocked_counter, blocked=True),
        "active": lambda: compile_and_check(active_counter, blocked=False),
        "discovery": discover,
    }
    for phase, run in phases.items():
        try:
            run()
        except Exception:
            print(f"--- {phase}", file=sys.stderr)
            traceback.print_exc()
            print(f"{phase}: failed")
        else:
            print(f"{phase}: ok")
    """
)


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plugin installed (without dependencies) into a fresh directory."""
    target = tmp_path_factory.mktemp("example_plugin")
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--target",
        str(target),
    ]
    if importlib.util.find_spec("hatchling") is not None:
        command.append("--no-build-isolation")  # works offline when hatchling is at hand
    result = subprocess.run(
        [*command, str(PLUGIN_SOURCE)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"pip install failed:\n{result.stdout}\n{result.stderr}"
    return target


@pytest.fixture(scope="module")
def script_run(
    plugin_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """:data:`SCRIPT`'s run with the plugin on PYTHONPATH, and its two counter files."""
    counters = tmp_path_factory.mktemp("counters")
    blocked, active = counters / "blocked.txt", counters / "runs.txt"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin_path), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(blocked), str(active)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return result, blocked, active


def test_entry_point_is_discovered_and_blockable(script_run) -> None:
    result, _, _ = script_run
    assert "discovery: ok" in result.stdout.splitlines(), result.stderr


def test_pass_runs_in_the_pipeline_unless_blocked(script_run) -> None:
    result, blocked_counter, counter = script_run
    lines = result.stdout.splitlines()
    assert "active: ok" in lines, result.stderr
    active_warnings = next(line for line in lines if line.startswith("warnings active"))
    assert "TorchstrataFallbackWarning" not in active_warnings, active_warnings
    assert "TorchstrataFallbackWarning" not in result.stderr, result.stderr
    runs = counter.read_text().splitlines()
    assert len(runs) == 1, runs  # compiled once, then served from the cache
    stage, ops = runs[0].split()
    assert stage == "post_decomp" and int(ops) > 0

    assert "blocked: ok" in lines, result.stderr
    assert not blocked_counter.exists()
