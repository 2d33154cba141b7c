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

COMPILE_SCRIPT = textwrap.dedent(
    """
    import sys

    import torch
    import torch.nn.functional as F

    import torchstrata.runtime as rt
    from torchstrata.core import CompileOptions

    counter_file, blocked = sys.argv[1], sys.argv[2] == "blocked"
    options = CompileOptions(
        blocked_plugins={"example-counter"} if blocked else (),
        stage_options={"example-counter": {"counter_file": counter_file}},
    )
    fn = lambda x, b: torch.softmax(F.gelu(x + b), -1)
    compiled = rt.compile(fn, options=options)
    x, b = torch.randn(64, 128), torch.randn(128)
    torch.testing.assert_close(compiled(x, b), fn(x, b))
    torch.testing.assert_close(compiled(x, b), fn(x, b))
    """
)

DISCOVERY_SCRIPT = textwrap.dedent(
    """
    from torchstrata.core import CompileOptions, create_plugin_manager

    manager = create_plugin_manager()
    assert manager.get_plugin("example-counter") is not None, manager.list_name_plugin()
    passes = manager.hook.torchstrata_graph_passes(stage="post_decomp", options=CompileOptions())
    assert [p.name for group in passes for p in group] == ["count-ops"], passes
    blocked = create_plugin_manager(blocked={"example-counter"})
    assert blocked.get_plugin("example-counter") is None
    print("discovered")
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


def run_python(script: str, plugin_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin_path), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )


def test_entry_point_is_discovered_and_blockable(plugin_path: Path) -> None:
    result = run_python(DISCOVERY_SCRIPT, plugin_path)
    assert result.returncode == 0, result.stderr
    assert "discovered" in result.stdout


def test_pass_runs_in_the_pipeline_unless_blocked(plugin_path: Path, tmp_path: Path) -> None:
    counter = tmp_path / "runs.txt"
    result = run_python(COMPILE_SCRIPT, plugin_path, str(counter), "active")
    assert result.returncode == 0, result.stderr
    assert "TorchstrataFallbackWarning" not in result.stderr, result.stderr
    runs = counter.read_text().splitlines()
    assert len(runs) == 1, runs  # compiled once, then served from the cache
    stage, ops = runs[0].split()
    assert stage == "post_decomp" and int(ops) > 0

    blocked_counter = tmp_path / "blocked.txt"
    result = run_python(COMPILE_SCRIPT, plugin_path, str(blocked_counter), "blocked")
    assert result.returncode == 0, result.stderr
    assert not blocked_counter.exists()
