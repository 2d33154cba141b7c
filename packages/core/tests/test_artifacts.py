"""The artifact store: verified reads, faults, permissions, eviction, settings, processes."""

from __future__ import annotations

import os
import signal
import stat
import time
import warnings
from pathlib import Path

import pytest

from torchstrata.core import CompileOptions
from torchstrata.core.artifacts import (
    LAYOUT,
    ArtifactStore,
    CacheSettings,
    CacheWarning,
    canonical_source,
)
from torchstrata.core.artifacts import store as store_module
from torchstrata.core.env_options import Environment

KEY = "ab" + "0" * 62
OTHER = "cd" + "1" * 62


def _store(root: Path, limit: int | None = None) -> ArtifactStore:
    return ArtifactStore(CacheSettings.resolve(root, limit))


def _entry(store: ArtifactStore, key: str = KEY, data: bytes = b"payload" * 100) -> Path:
    path = store.put("cpp", key, ".so", data)
    assert store.get("cpp", key, ".so") == path
    return path


def _meta(path: Path) -> Path:
    return path.with_name(path.name.split(".")[0] + ".meta")


def test_layout_is_content_addressed_and_private(tmp_path):
    store = _store(tmp_path / "cache")
    path = _entry(store)
    assert path == tmp_path / "cache" / LAYOUT / "cpp" / KEY[:2] / f"{KEY}.so"
    assert path.read_bytes() == b"payload" * 100
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(_meta(path).stat().st_mode) == 0o600
    for directory in (tmp_path / "cache", path.parent, path.parent.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert not list(path.parent.glob("*.tmp"))


@pytest.mark.parametrize("fault", ["truncated", "bit_flip", "missing_artifact", "bad_meta"])
def test_a_bad_entry_is_removed_with_a_warning_and_rebuilt(tmp_path, fault):
    store = _store(tmp_path)
    path = _entry(store)
    data = path.read_bytes()
    if fault == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif fault == "bit_flip":
        path.write_bytes(data[:10] + bytes([data[10] ^ 0x04]) + data[11:])
    elif fault == "missing_artifact":
        path.unlink()
    else:
        _meta(path).write_bytes(b"{not json")
    with pytest.warns(CacheWarning, match="removed the bad cache entry"):
        assert store.get("cpp", KEY, ".so") is None
    assert not path.exists() and not _meta(path).exists()
    built = []
    again, fresh = store.get_or_build("cpp", KEY, ".so", lambda: built.append(1) or data)
    assert fresh and built == [1] and again.read_bytes() == data
    assert store.get("cpp", KEY, ".so") == again


def test_an_entry_whose_writer_died_before_its_meta_is_a_quiet_miss(tmp_path):
    store = _store(tmp_path)
    path = _entry(store)
    _meta(path).unlink()  # the state a SIGKILL between the two renames leaves
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert store.get("cpp", KEY, ".so") is None
    assert not path.exists()


def test_an_entry_writable_by_others_is_not_trusted(tmp_path):
    store = _store(tmp_path)
    path = _entry(store)
    path.chmod(0o666)
    with pytest.warns(CacheWarning, match="not a private file"):
        assert store.get("cpp", KEY, ".so") is None
    rebuilt, fresh = store.get_or_build("cpp", KEY, ".so", lambda: b"new")
    assert fresh and stat.S_IMODE(rebuilt.stat().st_mode) == 0o600


def test_a_directory_readable_by_others_is_tightened(tmp_path):
    root = tmp_path / "cache"
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    with pytest.warns(CacheWarning, match="now 0700"):
        _store(root)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700


def test_a_directory_of_another_user_is_never_used(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    real_lstat = Path.lstat

    def lstat(path: Path) -> os.stat_result:  # ``root`` as another user's directory
        info = real_lstat(path)
        if path != root:
            return info
        fields = list(info[:10])
        fields[4] = os.geteuid() + 1  # st_uid
        return os.stat_result(fields)

    monkeypatch.setattr(Path, "lstat", lstat)
    with pytest.warns(CacheWarning, match="belongs to user"):
        store = _store(root)
    assert store.root != root and not root.joinpath(LAYOUT).exists()
    assert _entry(store).is_relative_to(store.root)


def test_a_build_the_store_cannot_take_is_still_handed_out(tmp_path, monkeypatch):
    store = _store(tmp_path)
    real = store_module.write_atomically

    def full_disk(path: Path, data: bytes) -> None:
        if path.is_relative_to(tmp_path):
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(store_module, "write_atomically", full_disk)
    with pytest.warns(CacheWarning, match="No space left"):
        path, fresh = store.get_or_build("cpp", KEY, ".so", lambda: b"built")
    assert fresh and path.read_bytes() == b"built" and not path.is_relative_to(tmp_path)
    assert store.get("cpp", KEY, ".so") is None


def test_least_recently_used_entries_are_evicted_at_the_cap(tmp_path):
    size = 1000  # an entry is 1000 bytes and a .meta of under 100: four fit in the cap
    store = _store(tmp_path, limit=4500)
    keys = [f"{index:02x}" + "e" * 62 for index in range(6)]
    paths = [store.put("cpp", key, ".so", bytes(size)) for key in keys[:4]]
    assert store.get("cpp", keys[0], ".so") == paths[0]  # a hit: now the most recent
    paths += [store.put("cpp", key, ".so", bytes(size)) for key in keys[4:]]
    assert store.info().total_bytes <= 4500
    kept = [index for index, path in enumerate(paths) if path.exists()]
    assert kept == [0, 3, 4, 5]  # 1 and 2 were the least recently used
    assert not _meta(paths[1]).exists() and store.get("cpp", keys[1], ".so") is None


def test_info_and_clear(tmp_path):
    store = _store(tmp_path)
    _entry(store)
    store.put("triton", OTHER, ".py", b"x = 1\n")
    (tmp_path / "cpp").mkdir()
    (tmp_path / "cpp" / "kernel0_0123456789abcdef01234567.so").write_bytes(b"old")
    info = store.info()
    assert {name: ns.entries for name, ns in info.namespaces.items()} == {"cpp": 1, "triton": 1}
    assert info.legacy.entries == 1 and info.stray_files == 0
    assert store.clear() == 2
    assert store.info().namespaces == {} and store.info().legacy.entries == 0
    assert store.get("triton", OTHER, ".py") is None


def test_location_precedence_and_xdg(tmp_path):
    env = Environment(cache_dir=None, xdg_cache_home=str(tmp_path / "xdg"), home=tmp_path)
    assert CacheSettings.resolve(environment=env).root == tmp_path / "xdg" / "torchstrata"
    assert CacheSettings.resolve(environment=env).origin == "$XDG_CACHE_HOME"
    relative = Environment(xdg_cache_home="relative/xdg", home=tmp_path)  # ignored (XDG spec)
    assert CacheSettings.resolve(environment=relative).root == tmp_path / ".cache" / "torchstrata"
    both = attrs_evolve(env, cache_dir=str(tmp_path / "env"))
    assert CacheSettings.resolve(environment=both).root == tmp_path / "env"
    explicit = CacheSettings.resolve(str(tmp_path / "opt"), environment=both)
    assert explicit.root == tmp_path / "opt" and explicit.origin == "CompileOptions.cache_dir"


def test_environment_is_read_when_asked(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("TORCHSTRATA_CACHE_DIR", raising=False)
    monkeypatch.setenv("CXX", "clang++ -stdlib=libc++")
    env = Environment.from_env()
    assert env.xdg_cache_home == str(tmp_path) and env.cxx == "clang++ -stdlib=libc++"
    assert CacheSettings.resolve().root == tmp_path / "torchstrata"


def test_one_layout_whatever_chooses_the_root(tmp_path, monkeypatch):
    by_option = _store(tmp_path / "a").put("cpp", KEY, ".so", b"x")
    monkeypatch.setenv("TORCHSTRATA_CACHE_DIR", str(tmp_path / "b"))
    by_env = ArtifactStore(CacheSettings.resolve()).put("cpp", KEY, ".so", b"x")
    assert by_option.relative_to(tmp_path / "a") == by_env.relative_to(tmp_path / "b")


def test_cache_size_limit_option_is_checked():
    assert CompileOptions(cache_size_limit=1 << 20).cache_size_limit == 1 << 20
    with pytest.raises(ValueError, match="cache_size_limit"):
        CompileOptions(cache_size_limit=0)


def test_canonical_source_renames_generated_names_only():
    first = "void k1(float* buf_mm, float* buf_mm_1) { acc_s = std::exp(buf_mm[0]); }"
    second = "void k7(float* buf_mm_4, float* buf_x) { acc_t = std::exp(buf_mm_4[0]); }"
    a, symbol = canonical_source(first, "k1", "ts_kernel", ("buf_", "acc_"))
    b, _ = canonical_source(second, "k7", "ts_kernel", ("buf_", "acc_"))
    assert a == b and symbol.startswith("ts_kernel_") and f"void {symbol}(" in a
    assert "std::exp" in a and "buf_mm" not in a
    different = "void k2(float* buf_a, float* buf_b) { acc_s = std::exp(buf_b[0]); }"
    c, other = canonical_source(different, "k2", "ts_kernel", ("buf_", "acc_"))
    assert c != a and other != symbol
    taken = "void ts_kernel(); void k3();"
    assert canonical_source(taken, "k3", "ts_kernel", ()) == (taken, "k3")


def attrs_evolve(env: Environment, **changes: str) -> Environment:
    import attrs

    return attrs.evolve(env, **changes)


# -- processes ----------------------------------------------------------------------------


def _in_child(work) -> int:
    """Run ``work()`` in a forked child; its wait status comes back."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            work()
        finally:
            os._exit(0)
    return os.waitpid(pid, 0)[1]


@pytest.mark.parametrize("moment", ["artifact", "meta"])
def test_a_writer_killed_mid_write_leaves_no_bad_entry(tmp_path, moment):
    """SIGKILL while the artifact (or its .meta) is a temporary file not yet renamed."""
    store = _store(tmp_path)

    def die_at_rename() -> None:
        real = os.replace

        def replace(source, target):
            if str(target).endswith(".so" if moment == "artifact" else ".meta"):
                os.kill(os.getpid(), signal.SIGKILL)
            real(source, target)

        os.replace = replace
        store.put("cpp", KEY, ".so", b"x" * 100_000)

    status = _in_child(die_at_rename)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a half-written entry is a plain miss
        assert store.get("cpp", KEY, ".so") is None
    path, fresh = store.get_or_build("cpp", KEY, ".so", lambda: b"y" * 10)
    assert fresh and store.get("cpp", KEY, ".so") == path and path.read_bytes() == b"y" * 10
    temporaries = list(path.parent.glob(".*.tmp"))
    assert temporaries or moment == "meta"  # left behind, and ignored
    for temporary in temporaries:  # swept by eviction once stale
        os.utime(temporary, (time.time() - 7200, time.time() - 7200))
    store.evict()
    assert not list(path.parent.glob(".*.tmp"))


def test_a_builder_killed_holding_the_lock_does_not_block_the_next(tmp_path):
    store = _store(tmp_path)
    started = tmp_path / "started"

    def build_forever() -> bytes:
        started.write_text("")
        os.kill(os.getpid(), signal.SIGKILL)
        return b""

    status = _in_child(lambda: store.get_or_build("cpp", KEY, ".so", build_forever))
    assert started.exists() and os.WTERMSIG(status) == signal.SIGKILL
    path, fresh = store.get_or_build("cpp", KEY, ".so", lambda: b"built")
    assert fresh and path.read_bytes() == b"built"


def test_eight_cold_processes_build_an_entry_once(tmp_path):
    builds = tmp_path / "builds"
    go = tmp_path / "go"
    root = tmp_path / "cache"

    def compete() -> None:
        while not go.exists():
            time.sleep(0.001)
        store = _store(root)  # each process opens the cold cache itself

        def build() -> bytes:
            with open(builds, "a") as handle:
                handle.write("built\n")
            time.sleep(0.2)  # long enough for the others to arrive and wait
            return b"artifact" * 1000

        path, _ = store.get_or_build("cpp", KEY, ".so", build)
        assert path.read_bytes() == b"artifact" * 1000
        (tmp_path / f"ok-{os.getpid()}").write_text("")

    children = []
    for _ in range(8):
        pid = os.fork()
        if pid == 0:
            try:
                compete()
            finally:
                os._exit(0)
        children.append(pid)
    go.write_text("")
    for pid in children:
        assert os.waitpid(pid, 0)[1] == 0
    assert len(list(tmp_path.glob("ok-*"))) == 8
    assert builds.read_text() == "built\n"
    assert _store(root).get("cpp", KEY, ".so") is not None
