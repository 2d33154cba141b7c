"""``python -m torchstrata.runtime cache info|clear`` over the artifact store."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from torchstrata.core.artifacts import CacheSettings, open_store
from torchstrata.runtime.cache_cli import format_size, main

KEY = "ab" + "0" * 62


def _run(*argv: str) -> str:
    out = io.StringIO()
    assert main(list(argv), out) == 0
    return out.getvalue()


def test_info_lists_entries_and_clear_removes_them(tmp_path):
    store = open_store(CacheSettings.resolve(tmp_path))
    store.put("cpp", KEY, ".so", b"x" * 3000)
    store.put("triton", "cd" + "1" * 62, ".py", b"x = 1\n")
    info = _run("cache", "info", "--dir", str(tmp_path))
    assert str(tmp_path) in info and "(chosen by --dir)" in info
    assert "cpp" in info and "triton" in info and "1 entries" in info
    assert "1.0 GiB cap" in info
    assert _run("cache", "clear", "--dir", str(tmp_path)).startswith("removed 2 entries")
    assert "(no entries)" in _run("cache", "info", "--dir", str(tmp_path))
    assert store.get("cpp", KEY, ".so") is None


def test_the_module_runs_and_honours_xdg_cache_home(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TORCHSTRATA_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "torchstrata.runtime", "cache", "info"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    assert f"cache directory: {tmp_path / 'torchstrata'}" in result.stdout
    assert "$XDG_CACHE_HOME" in result.stdout


def test_a_missing_cache_is_reported_not_created(tmp_path):
    root = tmp_path / "never-used"
    for action in ("info", "clear"):
        assert "empty" in _run("cache", action, "--dir", str(root))
    assert not root.exists()


def test_sizes_read_well():
    assert [format_size(n) for n in (0, 1023, 1536, 3 << 20, 5 << 30)] == [
        "0 B",
        "1023 B",
        "1.5 KiB",
        "3.0 MiB",
        "5.0 GiB",
    ]
