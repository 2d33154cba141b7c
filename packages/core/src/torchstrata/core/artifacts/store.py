"""The on-disk artifact store: content-addressed entries, verified before use.

Layout below the cache root (:class:`~torchstrata.core.artifacts.settings.CacheSettings`),
the same whichever setting chose the root::

    v1/<namespace>/<key[:2]>/<key><suffix>   the artifact (a shared object, a module, ...)
    v1/<namespace>/<key[:2]>/<key>.meta      JSON: the artifact's SHA-256 and size
    v1/locks/<key[:2]>.lock                  flock stripes (never deleted)

``key`` is the hash of everything that determines the artifact (its address); the
SHA-256 in the ``.meta`` file is the hash of the artifact's bytes, checked on every
read before the caller loads anything. The artifact is written before its ``.meta``,
each atomically, so an entry without its ``.meta`` is one whose writer died: it is a
miss. An entry that fails the check (truncated, bit-flipped, not ours, writable by
others, unreadable) is removed with a :class:`CacheWarning` and the caller rebuilds it.
A hit records its access time on the ``.meta`` file; above the size cap the least
recently used entries are evicted.

Concurrency: a writer holds the key's lock stripe, re-checks for an entry another
process finished meanwhile, builds, and writes; so eight cold processes compiling the
same function build each artifact once and the other seven read it. Readers take no
lock unless the check fails (a writer may be replacing a bad entry right then).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

from torchstrata.core.artifacts.entries import check, meta_path, recorded_sha256, touch
from torchstrata.core.artifacts.files import (
    locked,
    private_directory,
    remove_quietly,
    sha256_hex,
    write_atomically,
)
from torchstrata.core.artifacts.scan import (
    Scanned,
    file_size,
    files_in,
    remove_stale,
    scanned,
    subdirectories,
)
from torchstrata.core.artifacts.settings import CacheSettings
from torchstrata.core.logs import artifact_logger

#: The ``cache`` log artifact (``TORCHSTRATA_LOGS=cache``): hits, misses, writes, evictions.
_log = artifact_logger(__name__, "cache")

#: The layout version: a directory below the root, so a new layout never reads an old one.
LAYOUT = "v1"
#: Temporary files and half-written entries older than this are swept by eviction.
STALE_SECONDS = 3600.0
_KEY = re.compile(r"[0-9a-f]{16,128}")
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
_SUFFIX = re.compile(r"(\.[a-z0-9]+)+")
#: A kernel that the layout before ``v1`` stored at the root of an explicit cache_dir.
_LEGACY = re.compile(r"\w+_[0-9a-f]{24}\.(so|cpp)")


class CacheWarning(UserWarning):
    """A cache entry or directory was bad and has been dealt with (removed, tightened, or
    replaced by a private temporary directory); compilation goes on."""


@attrs.frozen
class NamespaceInfo:
    """How many entries one namespace holds and their bytes (artifacts and ``.meta``)."""

    entries: int
    bytes: int


@attrs.frozen
class CacheInfo:
    """What ``python -m torchstrata.runtime cache info`` prints."""

    root: Path
    origin: str
    size_limit: int
    namespaces: dict[str, NamespaceInfo]
    stray_files: int
    #: Files of the layout before ``v1`` (``cpp/``, ``triton/``, kernels at the root):
    #: never read any more; ``clear`` removes them.
    legacy: NamespaceInfo = NamespaceInfo(0, 0)

    @property
    def total_bytes(self) -> int:
        """All entries' bytes together."""
        return sum(info.bytes for info in self.namespaces.values())


class ArtifactStore:
    """One cache root (see the module docstring). Open it with :func:`open_store`."""

    def __init__(self, settings: CacheSettings) -> None:
        self.settings = settings
        self.root = settings.root
        try:
            tightened = private_directory(self.root)
            private_directory(self.root / LAYOUT)
            private_directory(self.root / LAYOUT / "locks")
        except OSError as error:
            # Never trust a directory someone else controls, and never fail a compile
            # for the cache's sake: this process caches in a private directory instead.
            self.root = Path(tempfile.mkdtemp(prefix="torchstrata-cache-"))
            warnings.warn(
                f"cannot use the cache directory {settings.root} ({error}); "
                f"caching in {self.root} for this process",
                CacheWarning,
                stacklevel=3,
            )
            tightened = False
            private_directory(self.root / LAYOUT / "locks")
        if tightened:
            warnings.warn(
                f"the cache directory {self.root} was readable by other users; "
                "its permissions are now 0700",
                CacheWarning,
                stacklevel=3,
            )
        self.base = self.root / LAYOUT
        self._estimate: int | None = None
        self._estimate_lock = threading.Lock()

    # -- paths -------------------------------------------------------------------------

    def artifact_path(self, namespace: str, key: str, suffix: str) -> Path:
        """Where the artifact ``key`` of ``namespace`` lives (whether or not it exists)."""
        if not _NAME.fullmatch(namespace):
            raise ValueError(f"cache namespace {namespace!r} must match {_NAME.pattern}")
        if not _KEY.fullmatch(key):
            raise ValueError(f"cache key {key!r} must be 16 to 128 lowercase hex digits")
        if not _SUFFIX.fullmatch(suffix):
            raise ValueError(f"cache suffix {suffix!r} must look like '.so' or '.tar.gz'")
        return self.base / namespace / key[:2] / f"{key}{suffix}"

    def _lock(self, key: str) -> contextlib.AbstractContextManager[None]:
        return locked(self.base / "locks" / f"{key[:2]}.lock")

    # -- reading -----------------------------------------------------------------------

    def get(self, namespace: str, key: str, suffix: str) -> Path | None:
        """The verified artifact's path, or None (a miss, or a bad entry now removed)."""
        artifact = self.artifact_path(namespace, key, suffix)
        problem = check(artifact)
        if problem is None:
            touch(artifact)
            _log.debug("cache hit: %s/%s", namespace, key)
            return artifact
        if problem == "missing":
            _log.debug("cache miss: %s/%s", namespace, key)
            return None
        with self._lock(key):  # a writer may be replacing this entry right now
            return self._get_locked(artifact)

    def _get_locked(self, artifact: Path) -> Path | None:
        problem = check(artifact)
        if problem is None:
            touch(artifact)
            return artifact
        if problem == "partial":  # its writer died between the artifact and its .meta
            remove_quietly(artifact)
        elif problem != "missing":
            self._remove_bad(artifact, problem)
        return None

    def get_with_digest(self, namespace: str, key: str, suffix: str) -> tuple[Path, str] | None:
        """:meth:`get` with the SHA-256 of the verified artifact (None: a miss, or a bad
        entry now removed, or an entry replaced by another writer between the two reads)."""
        found = self.get(namespace, key, suffix)
        digest = None if found is None else recorded_sha256(found)
        return None if found is None or digest is None else (found, digest)

    def discard(self, namespace: str, key: str, suffix: str, reason: str) -> None:
        """Remove an entry that passed the check but could not be loaded (``reason``)."""
        artifact = self.artifact_path(namespace, key, suffix)
        with self._lock(key):
            self._remove_bad(artifact, reason)

    def _remove_bad(self, artifact: Path, reason: str) -> None:
        _log.debug("cache entry removed as bad (%s): %s", reason, artifact)
        warnings.warn(
            f"removed the bad cache entry {artifact} ({reason}); it is rebuilt",
            CacheWarning,
            stacklevel=4,
        )
        remove_quietly(meta_path(artifact), artifact)

    # -- writing -----------------------------------------------------------------------

    def put(self, namespace: str, key: str, suffix: str, data: bytes) -> Path:
        """Store ``data`` as the artifact ``key`` (replacing any entry) and return its path."""
        artifact = self.artifact_path(namespace, key, suffix)
        with self._lock(key):
            self._write(artifact, data)
        self._account(len(data), artifact)
        return artifact

    def get_or_build(
        self, namespace: str, key: str, suffix: str, build: Callable[[], bytes]
    ) -> tuple[Path, bool]:
        """The artifact ``key``, built by ``build()`` and stored if it is missing or bad.

        Returns its path and whether this call built it. Only one process (or thread)
        builds a key at a time; the others wait and then read what it stored.
        """
        found = self.get(namespace, key, suffix)
        if found is not None:
            return found, False
        artifact = self.artifact_path(namespace, key, suffix)
        with self._lock(key):
            found = self._get_locked(artifact)
            if found is not None:
                return found, False
            data = build()
            try:
                self._write(artifact, data)
            except OSError as error:  # a full disk, say: the build is not lost for it
                return self._private_copy(artifact, data, error), True
        self._account(len(data), artifact)
        return artifact, True

    def _private_copy(self, artifact: Path, data: bytes, error: OSError) -> Path:
        """``data`` in a private temporary directory of this process, when the store
        cannot take it (``error``)."""
        remove_quietly(meta_path(artifact), artifact)
        copy = Path(tempfile.mkdtemp(prefix="torchstrata-artifact-")) / artifact.name
        write_atomically(copy, data)
        warnings.warn(
            f"cannot write the cache entry {artifact} ({error}); using {copy} in this process",
            CacheWarning,
            stacklevel=4,
        )
        return copy

    def _write(self, artifact: Path, data: bytes) -> None:
        private_directory(artifact.parent.parent)
        private_directory(artifact.parent)
        write_atomically(artifact, data)
        meta = {"sha256": sha256_hex(data), "size": len(data), "created": time.time()}
        write_atomically(meta_path(artifact), json.dumps(meta).encode())
        touch(artifact)
        _log.debug("cache write: %s (%d bytes)", artifact, len(data))

    # -- size cap ----------------------------------------------------------------------

    def _account(self, size: int, keep: Path) -> None:
        """Evict when this process's running estimate of the total passes the cap (the
        first write of a process scans to learn the total)."""
        with self._estimate_lock:
            if self._estimate is not None:
                self._estimate += size
                if self._estimate <= self.settings.size_limit:
                    return
        self.evict(keep=(keep,))

    def evict(self, keep: tuple[Path, ...] = ()) -> int:
        """Remove least recently used entries until the total is under the cap, and
        stale temporary files; returns the number of entries removed. ``keep``: artifacts
        never evicted by this call (the one just written)."""
        entries = sorted(self._scan(sweep=True), key=lambda entry: entry.accessed_ns)
        total = sum(entry.size for entry in entries)
        removed = 0
        for entry in entries:
            if total <= self.settings.size_limit:
                break
            if entry.artifact in keep:
                continue
            with self._lock(entry.meta.name):  # not under a writer replacing the entry
                remove_quietly(entry.meta, entry.artifact)  # the .meta first: a miss from now
            total -= entry.size
            removed += 1
        with self._estimate_lock:
            self._estimate = total
        if removed:
            _log.debug("cache evicted %d entries; %d bytes left", removed, total)
        return removed

    def _scan(self, sweep: bool = False) -> Iterator[Scanned]:
        """Every complete entry; with ``sweep``, remove stale temporary files and
        artifacts whose writer died before writing the ``.meta``."""
        stale = time.time() - STALE_SECONDS
        for shard in self._shards():
            groups: dict[str, list[os.DirEntry[str]]] = {}
            for file in files_in(shard):
                stem = "" if file.name.startswith(".") else file.name.split(".", 1)[0]
                groups.setdefault(stem, []).append(file)
            for stem, files in groups.items():
                entry = scanned(stem, files) if stem else None
                if entry is not None:
                    yield entry
                elif sweep:
                    remove_stale(files, stale)

    def _shards(self) -> Iterator[Path]:
        for namespace in subdirectories(self.base):
            if namespace.name != "locks":
                yield from subdirectories(namespace)

    # -- management --------------------------------------------------------------------

    def info(self) -> CacheInfo:
        """Entries and bytes per namespace, and files that belong to no entry."""
        namespaces: dict[str, NamespaceInfo] = {}
        for entry in self._scan():
            namespace = entry.meta.parent.parent.name
            old = namespaces.get(namespace, NamespaceInfo(0, 0))
            namespaces[namespace] = NamespaceInfo(old.entries + 1, old.bytes + entry.size)
        legacy = self.legacyfiles_in()
        complete = sum(info.entries for info in namespaces.values())
        stray = sum(len(files_in(shard)) for shard in self._shards()) - 2 * complete
        return CacheInfo(
            self.root,
            self.settings.origin,
            self.settings.size_limit,
            dict(sorted(namespaces.items())),
            stray,
            NamespaceInfo(len(legacy), sum(file_size(path) for path in legacy)),
        )

    def legacyfiles_in(self) -> list[Path]:
        """The files that the layout before ``v1`` left in this root."""
        found = [
            path
            for directory in (self.root / "cpp", self.root / "triton")
            if directory.is_dir() and not directory.is_symlink()
            for path in directory.rglob("*")
            if path.is_file()
        ]
        return found + [
            self.root / file.name for file in files_in(self.root) if _LEGACY.fullmatch(file.name)
        ]

    def clear(self) -> int:
        """Remove every entry (and stray file) of this layout and the files of the layout
        before it; returns the entries removed."""
        removed = sum(1 for _ in self._scan())
        remove_quietly(*self.legacyfiles_in())
        for directory in (self.root / "cpp", self.root / "triton"):
            if directory.is_dir() and not directory.is_symlink():
                shutil.rmtree(directory, ignore_errors=True)
        for namespace in subdirectories(self.base):
            if namespace.name != "locks":  # held locks must stay the same files
                shutil.rmtree(namespace, ignore_errors=True)
        with self._estimate_lock:
            self._estimate = 0
        return removed


_STORES: dict[CacheSettings, ArtifactStore] = {}
_STORES_LOCK = threading.Lock()


def open_store(settings: CacheSettings | None = None) -> ArtifactStore:
    """The store for ``settings`` (default: :meth:`CacheSettings.resolve` of the
    environment), one per settings in a process."""
    settings = settings if settings is not None else CacheSettings.resolve()
    with _STORES_LOCK:
        store = _STORES.get(settings)
        if store is None:
            store = _STORES[settings] = ArtifactStore(settings)
        return store
