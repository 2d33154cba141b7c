"""Triton's compiled files, for the kernels torchstrata compiles, kept in the artifact store.

Triton keeps what it compiles (each IR, the PTX, the cubin, the metadata JSON, and the
driver's launcher stubs, shared objects that it imports) in its own cache directory
(``TRITON_CACHE_DIR``) and loads them back unchecked. It reaches that directory through a
*cache manager*: ``triton.runtime.cache.get_cache_manager(key)`` instantiates
``triton.knobs.cache.manager_class`` (``$TRITON_CACHE_MANAGER``, ``module:Class``), read
at every compile in Triton 3.4 and later (3.6 and 3.9 alike).

:func:`verified_triton_cache` sets that knob to :class:`ScopedTritonCache` for a block,
and the inductor runs its Triton compiles and first launches in such a block. Each file
Triton stores is then an entry of the store (:mod:`~torchstrata.core.artifacts.store`)::

    v1/triton-compiled/<k[:2]>/<k>.<ext>   the file (ext: Triton's, ``.cubin``, ``.json``,
    v1/triton-compiled/<k[:2]>/<k>.meta    ``.so``, ...: Triton reads an IR's kind from it)

``k`` is the SHA-256 of Triton's key and the file's name. Entries are written atomically
and checked (size, SHA-256, ownership) on every read; a bad one is removed with a
:class:`~torchstrata.core.artifacts.CacheWarning` and a ``cache`` log line, and reads as
a miss, so Triton compiles the kernel again and stores it afresh. A *group* (Triton's
record of one compile's files, looked up before anything is loaded) is an entry too,
holding each member's name and SHA-256: it is a hit only when every member is sound and
is the file that compile wrote, so the files of two racing compiles are never mixed.

The knob is process-wide, the scope is not: the store is held in a context variable of
the block's thread, and a :class:`ScopedTritonCache` made anywhere else (another
thread's Triton code while a block is open, Triton's override and dump directories)
is the manager Triton would have used without us. The knob is set while at least one
block is open in the process and restored when the last one closes (unless someone set
it meanwhile).

This module imports Triton, so it lives in the inductor; the store it builds on
(:mod:`torchstrata.core.artifacts`) does not import Triton.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import re
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

from triton.runtime.cache import CacheManager, FileCacheManager

try:
    from triton import knobs as _knobs
except ImportError:  # pragma: no cover - Triton < 3.4: no knob, nothing verified
    _knobs = None

from torchstrata.core.artifacts.files import sha256_hex, write_atomically
from torchstrata.core.artifacts.store import ArtifactStore, CacheWarning
from torchstrata.core.logs import artifact_logger

_log = artifact_logger(__name__, "cache")

#: The artifact store's namespace for Triton's compiled files.
NAMESPACE = "triton-compiled"
#: How Triton names the record of a compile's files (``__grp__<metadata file name>``).
GROUP_PREFIX = "__grp__"
_EXTENSION = re.compile(r"[a-z0-9]+")


def entry_key(triton_key: str, filename: str) -> str:
    """The store key of Triton's file ``filename`` under its key ``triton_key``."""
    return hashlib.sha256(f"{triton_key}/{filename}".encode()).hexdigest()


def entry_suffix(filename: str) -> str:
    """The entry's suffix: the file name's extension (Triton reads an IR's kind, and
    Python an extension module's loader, from it), or ``.bin`` for one the store's
    names cannot hold."""
    extension = filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
    return f".{extension}" if _EXTENSION.fullmatch(extension) else ".bin"


def _as_bytes(data: Any) -> bytes:
    """What Triton hands to ``put``: bytes (binaries), text, or an IR module (its text)."""
    if isinstance(data, bytes):
        return data
    return str(data).encode()


class VerifiedTritonCache(CacheManager):
    """Triton's cache manager interface over ``store``, for one Triton key (see the
    module docstring for the layout and what is checked)."""

    def __init__(self, store: ArtifactStore, key: str) -> None:
        self.store = store
        self.key = key
        #: The SHA-256 of each file this manager wrote (one compile's files), for its group.
        self.written: dict[str, str] = {}

    def _entry(self, filename: str) -> tuple[str, str]:
        return entry_key(self.key, filename), entry_suffix(filename)

    def get_file(self, filename: str) -> str | None:
        """The verified file's path, or None (a miss, or a bad entry now removed)."""
        found = self.store.get(NAMESPACE, *self._entry(filename))
        return None if found is None else str(found)

    def put(self, data: Any, filename: str, binary: bool = True) -> str:
        """Store ``data`` (bytes, or text whatever ``binary`` says, as Triton's own manager
        does) as ``filename`` and return its path."""
        payload = _as_bytes(data)
        try:
            path = self.store.put(NAMESPACE, *self._entry(filename), payload)
        except OSError as error:  # a full disk, say: the compile is not lost for it
            path = self._private_copy(filename, payload, error)
        self.written[filename] = sha256_hex(payload)
        return str(path)

    def _private_copy(self, filename: str, payload: bytes, error: OSError) -> Path:
        """``payload`` in a private temporary directory of this process, for Triton to read
        back now, when the store cannot take it (``error``); the next process compiles
        the kernel again."""
        key, suffix = self._entry(filename)
        copy = Path(tempfile.mkdtemp(prefix="torchstrata-triton-")) / f"{key}{suffix}"
        write_atomically(copy, payload)
        warnings.warn(
            f"cannot write Triton's {filename} to the cache ({error}); using {copy} in this "
            "process",
            CacheWarning,
            stacklevel=4,
        )
        return copy

    def get_group(self, filename: str) -> dict[str, str] | None:
        """The paths of the files of the group ``filename`` by name, or None unless every
        member is sound and is the file the group recorded."""
        found = self.store.get_with_digest(NAMESPACE, *self._entry(GROUP_PREFIX + filename))
        if found is None:
            return None
        try:
            members = json.loads(found[0].read_bytes())["files"]
        except (OSError, ValueError, KeyError, TypeError):
            members = None
        if not isinstance(members, dict):
            self.store.discard(
                NAMESPACE, *self._entry(GROUP_PREFIX + filename), "not a group record"
            )
            return None
        paths = {}
        for name, digest in members.items():
            member = self.store.get_with_digest(NAMESPACE, *self._entry(str(name)))
            if member is None or member[1] != digest:
                # gone, bad (removed with a warning), or rewritten by another compile
                _log.debug("triton cache group %s: member %s unusable", filename, name)
                return None
            paths[str(name)] = str(member[0])
        _log.debug("triton cache hit: %s (%d files)", filename, len(paths))
        return paths

    def put_group(self, filename: str, group: dict[str, str]) -> str:
        """Record the files named in ``group`` (Triton's name -> path map, of files this
        manager wrote) with their SHA-256, as the group ``filename``."""
        members = {}
        for name in group:
            digest = self.written.get(name)
            if digest is None:  # not written through this manager: the stored one
                found = self.store.get_with_digest(NAMESPACE, *self._entry(name))
                if found is None:
                    raise FileNotFoundError(f"{name}: no such file in Triton's group {filename}")
                digest = found[1]
            members[name] = digest
        record = json.dumps({"files": members}, sort_keys=True)
        return self.put(record, GROUP_PREFIX + filename)


#: The store of the innermost :func:`verified_triton_cache` block of this context.
_ACTIVE: contextvars.ContextVar[ArtifactStore | None] = contextvars.ContextVar(
    "torchstrata_triton_cache", default=None
)


class ScopedTritonCache(CacheManager):
    """The class :func:`verified_triton_cache` puts in ``triton.knobs.cache.manager_class``:
    a :class:`VerifiedTritonCache` inside a block of this context, otherwise (and for
    Triton's override and dump directories) the manager Triton would have used."""

    def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
        store = _ACTIVE.get()
        self.files: Any
        if override or dump:  # passed only when set, as Triton does
            self.files = _KNOB.fallback(key, override=override, dump=dump)
        elif store is None:
            self.files = _KNOB.fallback(key)
        else:
            self.files = VerifiedTritonCache(store, key)

    def get_file(self, filename: str) -> str | None:
        """See :meth:`VerifiedTritonCache.get_file`."""
        return self.files.get_file(filename)

    def put(self, data: Any, filename: str, binary: bool = True) -> str:
        """See :meth:`VerifiedTritonCache.put`."""
        return self.files.put(data, filename, binary=binary)

    def get_group(self, filename: str) -> dict[str, str] | None:
        """See :meth:`VerifiedTritonCache.get_group`."""
        return self.files.get_group(filename)

    def put_group(self, filename: str, group: dict[str, str]) -> Any:
        """See :meth:`VerifiedTritonCache.put_group`."""
        return self.files.put_group(filename, group)

    def __getattr__(self, name: str) -> Any:
        # what else a manager of the fallback class offers (``cache_dir``, ``has_file``)
        files = self.__dict__.get("files")
        if files is None:
            raise AttributeError(name)
        return getattr(files, name)


class _Knob:
    """``triton.knobs.cache.manager_class`` while blocks are open: how many, and what it
    was before the first (restored after the last)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.saved: tuple[bool, Any] = (False, None)  # (set explicitly, its value)
        self.fallback: Any = FileCacheManager

    def acquire(self) -> bool:
        """Put :class:`ScopedTritonCache` in the knob; False on a Triton without knobs."""
        cache = _knob_cache()
        if cache is None:
            return False
        with self.lock:
            if self.users == 0:
                self.saved = ("manager_class" in vars(cache), vars(cache).get("manager_class"))
                try:
                    previous = cache.manager_class  # set, or $TRITON_CACHE_MANAGER's class
                except Exception:  # noqa: BLE001 - a bad variable: Triton's own manager
                    previous = None
                if previous is ScopedTritonCache:
                    previous = None
                self.fallback = previous or FileCacheManager
                cache.manager_class = ScopedTritonCache
            self.users += 1
        return True

    def release(self) -> None:
        """One block closed: restore the knob after the last, unless it was changed."""
        cache = _knob_cache()
        with self.lock:
            self.users -= 1
            if self.users:
                return
            self.fallback = FileCacheManager  # for a ScopedTritonCache named by the user
            if vars(cache).get("manager_class") is not ScopedTritonCache:
                return  # set by someone else meanwhile: theirs stays
            explicit, value = self.saved
            if explicit:
                cache.manager_class = value
            else:
                del cache.manager_class


_KNOB = _Knob()


def _knob_cache() -> Any:
    """``triton.knobs.cache``, or None (a Triton before 3.4)."""
    return None if _knobs is None else _knobs.cache


class _Scope:
    """The block of :func:`verified_triton_cache` (a class: this is entered around each
    launch through Triton's dispatch, where a generator's frames cost host time)."""

    __slots__ = ("installed", "store", "token")

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store
        self.token: contextvars.Token[ArtifactStore | None] | None = None
        self.installed = False

    def __enter__(self) -> None:
        if _ACTIVE.get() is self.store:
            return  # inside a block of this store already
        self.token = _ACTIVE.set(self.store)
        self.installed = _KNOB.acquire()
        if not self.installed:
            _log.debug("this Triton has no knobs: its cache is not verified")

    def __exit__(self, *exc_info: object) -> None:
        if self.token is None:
            return
        if self.installed:
            _KNOB.release()
        _ACTIVE.reset(self.token)


def verified_triton_cache(store: ArtifactStore) -> contextlib.AbstractContextManager[None]:
    """A block in which Triton's compiles and loads (on this thread) go through ``store``,
    verified (see the module docstring). Reentrant; cheap when already inside a block of
    the same store."""
    return _Scope(store)
