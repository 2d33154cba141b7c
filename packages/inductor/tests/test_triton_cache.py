"""Triton's compiled files in the artifact store: round trips, faults, permissions, and
the scoped selection through ``triton.knobs.cache.manager_class``."""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
import warnings
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")

from triton import knobs  # noqa: E402
from triton.runtime.cache import FileCacheManager, get_cache_manager  # noqa: E402

from torchstrata.core.artifacts import LAYOUT, ArtifactStore, CacheSettings, CacheWarning  # noqa: E402
from torchstrata.core.artifacts import files as artifact_files  # noqa: E402
from torchstrata.inductor.codegen.triton.verified_cache import (  # noqa: E402
    NAMESPACE,
    ScopedTritonCache,
    VerifiedTritonCache,
    entry_key,
    verified_triton_cache,
)

#: A Triton key as Triton hands it to a manager (base32 of a SHA-256).
KEY = "MZXW6YTBOI" * 5 + "AB"
HEX_KEY = "ab" * 32
CUBIN = bytes(range(256)) * 40
STORE_LOG = "torchstrata.core.artifacts.store.__cache"


def _store(root: Path) -> ArtifactStore:
    return ArtifactStore(CacheSettings.resolve(root))


def _compile(manager: VerifiedTritonCache) -> dict[str, str]:
    """What ``triton.compile`` stores for a kernel: its IRs, binary, metadata and group."""
    group = {
        "k.source": manager.put(object.__repr__(manager), "k.source"),
        "k.ptx": manager.put("// ptx text\n.version 8.4\n", "k.ptx"),
        "k.cubin": manager.put(CUBIN, "k.cubin"),
        "k.json": manager.put(json.dumps({"name": "k", "shared": 0}), "k.json", binary=False),
    }
    manager.put_group("k.json", group)
    return group


@pytest.fixture(autouse=True)
def _triton_dirs(tmp_path, monkeypatch):
    """Triton's own cache in a temporary directory (never the user's ~/.triton)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-own"))
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)


def test_round_trip_keeps_names_and_extensions_under_the_store_layout(tmp_path):
    store = _store(tmp_path / "cache")
    manager = VerifiedTritonCache(store, KEY)
    written = _compile(manager)
    reader = VerifiedTritonCache(store, KEY)  # a later process: a fresh manager
    group = reader.get_group("k.json")
    assert group is not None and set(group) == set(written)
    for name, path in group.items():
        assert path == written[name]
        expected = tmp_path / "cache" / LAYOUT / NAMESPACE
        expected = expected / entry_key(KEY, name)[:2] / f"{entry_key(KEY, name)}.{name[2:]}"
        assert Path(path) == expected  # Triton reads an IR's kind from the extension
    assert Path(group["k.cubin"]).read_bytes() == CUBIN
    assert json.loads(Path(group["k.json"]).read_text())["name"] == "k"
    assert reader.get_file("k.ptx") == written["k.ptx"]
    assert reader.get_file("k.llir") is None and reader.get_group("other.json") is None
    assert not (tmp_path / "triton-own").exists()


def test_files_and_directories_are_private_and_writes_leave_no_temporaries(tmp_path):
    store = _store(tmp_path / "cache")
    group = _compile(VerifiedTritonCache(store, KEY))
    cubin = Path(group["k.cubin"])
    for directory in (tmp_path / "cache", tmp_path / "cache" / LAYOUT, cubin.parent.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(cubin.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(cubin.stat().st_mode) == 0o600
    assert not list((tmp_path / "cache").rglob("*.tmp"))


def test_a_write_that_fails_midway_leaves_the_old_file_or_none(tmp_path, monkeypatch):
    store = _store(tmp_path / "cache")
    manager = VerifiedTritonCache(store, KEY)
    path = Path(manager.put(b"old binary", "k.cubin"))

    def killed(source, destination):
        raise KeyboardInterrupt  # the process dies between writing and renaming

    monkeypatch.setattr(artifact_files.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        manager.put(b"new binary, never renamed into place", "k.cubin")
    with pytest.raises(KeyboardInterrupt):
        manager.put(b"a new file", "k.ptx")
    monkeypatch.undo()
    assert manager.get_file("k.cubin") == str(path) and path.read_bytes() == b"old binary"
    assert manager.get_file("k.ptx") is None
    assert not list((tmp_path / "cache").rglob("*.tmp"))


@pytest.mark.parametrize("fault", ["truncated", "bit_flip", "group_bit_flip"])
def test_a_bad_file_is_removed_with_a_warning_and_a_log_line_then_rebuilt(tmp_path, fault, caplog):
    store = _store(tmp_path / "cache")
    group = _compile(VerifiedTritonCache(store, KEY))
    cubin = Path(group["k.cubin"])
    if fault == "truncated":
        cubin.write_bytes(CUBIN[: len(CUBIN) // 2])
        bad = cubin
    else:
        bad = cubin if fault == "bit_flip" else Path(store.get(NAMESPACE, *_group_entry()))
        data = bytearray(bad.read_bytes())
        data[len(data) // 2] ^= 0x10
        bad.write_bytes(bytes(data))
    reader = VerifiedTritonCache(store, KEY)
    with (
        caplog.at_level(logging.DEBUG, logger=STORE_LOG),
        pytest.warns(CacheWarning, match="removed the bad cache entry"),
    ):
        assert reader.get_group("k.json") is None  # Triton compiles the kernel again
    assert not bad.exists()
    assert any("removed as bad" in record.getMessage() for record in caplog.records)
    rebuilt = _compile(VerifiedTritonCache(store, KEY))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        group = VerifiedTritonCache(store, KEY).get_group("k.json")
    assert group == rebuilt and Path(group["k.cubin"]).read_bytes() == CUBIN


def _group_entry() -> tuple[str, str]:
    return entry_key(KEY, "__grp__k.json"), ".json"


def test_a_bad_single_file_reads_as_a_miss(tmp_path):
    store = _store(tmp_path / "cache")
    manager = VerifiedTritonCache(store, KEY)
    path = Path(manager.put(b"\x7fELF launcher stub" * 50, "__triton_launcher.cpython-311.so"))
    assert path.suffix == ".so"  # importable as an extension module
    path.write_bytes(path.read_bytes()[:-1] + b"\0")
    with pytest.warns(CacheWarning):
        assert manager.get_file("__triton_launcher.cpython-311.so") is None
    assert not path.exists()


def test_a_group_whose_member_another_compile_rewrote_is_a_quiet_miss(tmp_path):
    store = _store(tmp_path / "cache")
    _compile(VerifiedTritonCache(store, KEY))
    VerifiedTritonCache(store, KEY).put(CUBIN + b"\0", "k.cubin")  # a racing compile
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # sound files: nothing is removed
        assert VerifiedTritonCache(store, KEY).get_group("k.json") is None
    assert _compile(VerifiedTritonCache(store, KEY))  # the next compile writes a whole group
    assert VerifiedTritonCache(store, KEY).get_group("k.json") is not None


def test_knob_selects_the_verified_manager_only_inside_the_scope(tmp_path):
    store = _store(tmp_path / "cache")
    assert "manager_class" not in vars(knobs.cache)
    outside = get_cache_manager(HEX_KEY)
    assert type(outside) is FileCacheManager
    with verified_triton_cache(store):
        assert knobs.cache.manager_class is ScopedTritonCache
        inside = get_cache_manager(HEX_KEY)
        assert isinstance(inside, ScopedTritonCache)
        assert isinstance(inside.files, VerifiedTritonCache) and inside.files.store is store
        path = Path(inside.put(CUBIN, "k.cubin"))
        assert path.is_relative_to(tmp_path / "cache") and inside.get_file("k.cubin") == str(path)
        with verified_triton_cache(_store(tmp_path / "other")):  # nested, another store
            assert get_cache_manager(HEX_KEY).files.store is not store
        assert get_cache_manager(HEX_KEY).files.store is store
        # Triton's override and dump directories stay Triton's
        assert type(ScopedTritonCache("KEY", override=True).files) is FileCacheManager
    assert "manager_class" not in vars(knobs.cache)
    assert type(get_cache_manager(HEX_KEY)) is FileCacheManager
    assert not list((tmp_path / "triton-own").rglob("k.cubin"))


def test_other_threads_keep_triton_s_manager_while_a_scope_is_open(tmp_path):
    store = _store(tmp_path / "cache")
    seen: list[object] = []
    with verified_triton_cache(store):
        thread = threading.Thread(target=lambda: seen.append(get_cache_manager(HEX_KEY)))
        thread.start()
        thread.join()
    (manager,) = seen
    assert isinstance(manager, ScopedTritonCache) and type(manager.files) is FileCacheManager
    assert Path(manager.put(b"user kernel", "u.cubin")).is_relative_to(tmp_path / "triton-own")
    assert not manager.get_file("u.ptx") and manager.has_file("u.cubin")  # its own methods


class UserManager(FileCacheManager):
    """A manager the user selected before torchstrata compiled anything (taking the key
    alone, as Triton's managers before ``override``/``dump`` did)."""

    def __init__(self, key):
        super().__init__(key)


def test_a_user_s_manager_is_the_fallback_and_is_restored(tmp_path, monkeypatch):
    knobs.cache.manager_class = UserManager
    try:
        seen: list[object] = []
        with verified_triton_cache(_store(tmp_path / "cache")):
            thread = threading.Thread(target=lambda: seen.append(get_cache_manager(HEX_KEY)))
            thread.start()
            thread.join()
        assert type(seen[0].files) is UserManager
        assert knobs.cache.manager_class is UserManager
    finally:
        del knobs.cache.manager_class
    # selected by Triton's variable instead: the same
    monkeypatch.setenv("TRITON_CACHE_MANAGER", f"{__name__}:UserManager")
    with verified_triton_cache(_store(tmp_path / "cache")):
        assert knobs.cache.manager_class is ScopedTritonCache
    assert knobs.cache.manager_class is UserManager


def test_the_scoped_class_can_be_named_in_triton_s_variable(tmp_path, monkeypatch):
    """Named in ``$TRITON_CACHE_MANAGER`` it passes Triton's type check and, outside a
    scope, behaves as Triton's own manager."""
    name = "torchstrata.inductor.codegen.triton.verified_cache:ScopedTritonCache"
    monkeypatch.setenv("TRITON_CACHE_MANAGER", name)
    manager = get_cache_manager(HEX_KEY)
    assert isinstance(manager, ScopedTritonCache) and type(manager.files) is FileCacheManager
    with verified_triton_cache(_store(tmp_path / "cache")):
        assert isinstance(get_cache_manager(HEX_KEY).files, VerifiedTritonCache)


def _triton_source() -> object:
    """A kernel for ``triton.compile`` (compiled for an sm_90 target: no GPU needed)."""
    import triton.language as tl
    from triton.compiler import ASTSource

    @triton.jit
    def exp_add(x, y, out, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = i < n
        value = tl.exp(tl.load(x + i, mask=mask)) + tl.load(y + i, mask=mask)
        tl.store(out + i, value, mask=mask)

    signature = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    return ASTSource(exp_add, signature, {(4,): 256})


def test_triton_s_own_compile_goes_through_the_store_and_rebuilds_a_bad_cubin(
    tmp_path, monkeypatch
):
    """``triton.compile`` (as Triton's dispatch calls it) in a scope: its files land in the
    store, a second compile is a verified hit, and a bit-flipped cubin is removed with a
    warning and compiled again."""
    from triton.backends.compiler import GPUTarget

    store, source, target = _store(tmp_path / "cache"), _triton_source(), GPUTarget("cuda", 90, 32)
    writes: list[str] = []
    real_put = VerifiedTritonCache.put

    def counted_put(self, data, filename, binary=True):
        writes.append(filename)
        return real_put(self, data, filename, binary)

    monkeypatch.setattr(VerifiedTritonCache, "put", counted_put)

    def compile_once() -> tuple[bytes, bool]:
        """The cubin and whether Triton compiled it (wrote files) or found it."""
        before = len(writes)
        with verified_triton_cache(store):
            cubin = triton.compile(source, target=target).asm["cubin"]
        return cubin, len(writes) > before

    cubin, compiled = compile_once()
    assert compiled and any(name.endswith(".cubin") for name in writes)
    (stored,) = (tmp_path / "cache" / LAYOUT / NAMESPACE).rglob("*.cubin")
    assert stored.read_bytes() == cubin and not list((tmp_path / "triton-own").rglob("*.*"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        assert compile_once() == (cubin, False)
    data = bytearray(cubin)
    data[len(data) // 2] ^= 0x01
    stored.write_bytes(bytes(data))
    with pytest.warns(CacheWarning, match="does not match its SHA-256"):
        assert compile_once() == (cubin, True)
    assert stored.read_bytes() == cubin
    assert compile_once() == (cubin, False)


def test_racing_processes_never_take_a_sound_file_for_a_bad_one(tmp_path):
    """Eight processes compile the same key at once, each writing files of its own (a
    compile need not be byte-for-byte deterministic) and reading the group back: no
    reader takes a file being replaced for a bad one (no warning, nothing removed), and
    once they are done the group is one writer's files."""
    root, go = tmp_path / "cache", tmp_path / "go"

    def child() -> int:
        store = _store(root)
        while not go.exists():
            pass
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)
            for round_ in range(15):
                writer = f"{os.getpid()}-{round_}"
                manager = VerifiedTritonCache(store, KEY)
                group = {
                    "k.cubin": manager.put(writer.encode() * 64, "k.cubin"),
                    "k.json": manager.put(json.dumps({"writer": writer}), "k.json"),
                }
                manager.put_group("k.json", group)
                VerifiedTritonCache(store, KEY).get_group("k.json")
        return 0

    pids = []
    for _ in range(8):
        pid = os.fork()
        if pid == 0:
            status = 4  # an exception (a CacheWarning among them)
            try:
                status = child()
            finally:
                os._exit(status)
        pids.append(pid)
    go.write_text("")
    statuses = [os.waitpid(pid, 0)[1] for pid in pids]
    assert all(os.WIFEXITED(s) and os.WEXITSTATUS(s) == 0 for s in statuses), statuses
    manager = VerifiedTritonCache(_store(root), KEY)
    found = manager.get_group("k.json")
    if found is None:  # the last group written was overtaken by another writer's file
        _compile(manager)
        found = VerifiedTritonCache(_store(root), KEY).get_group("k.json")
    assert found is not None
    writer = json.loads(Path(found["k.json"]).read_text()).get("writer")
    if writer is not None:
        assert Path(found["k.cubin"]).read_bytes() == writer.encode() * 64


def test_a_file_the_store_cannot_take_is_still_handed_to_triton(tmp_path, monkeypatch):
    store = _store(tmp_path / "cache")

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "put", full)
    manager = VerifiedTritonCache(store, KEY)
    with pytest.warns(CacheWarning, match="No space left"):
        path = Path(manager.put(CUBIN, "k.cubin"))
    assert path.read_bytes() == CUBIN and path.suffix == ".cubin"
    assert (
        not path.is_relative_to(tmp_path / "cache") and stat.S_IMODE(path.stat().st_mode) == 0o600
    )
    monkeypatch.undo()
    assert manager.get_file("k.cubin") is None  # the next process compiles it again
