"""File primitives of the artifact store: private directories, atomic writes, locks.

Every write goes to a temporary file in the destination's own directory (created 0600 by
``mkstemp``) and is moved into place with ``os.replace``, so a reader sees the old file
or the whole new one, never part of one, and a writer killed mid-write leaves only a
``*.tmp`` file behind (swept by eviction). Locks are ``fcntl.flock`` on a fixed set of
lock files that are never deleted (deleting a locked file would let a second process
lock a new file of the same name).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

#: Suffix of the temporary files that writes go through.
TEMPORARY_SUFFIX = ".tmp"
#: Owner-only permissions of the cache's directories and files.
DIRECTORY_MODE = 0o700
FILE_MODE = 0o600


class UnsafeDirectoryError(OSError):
    """A cache directory that another user owns (or that is not a directory): never used."""


def owner_uid() -> int:
    """The user id that cache files must belong to (this process's effective user)."""
    return os.geteuid()


def private_directory(path: Path) -> bool:
    """Create ``path`` (and parents) with mode 0700, or tighten an existing one to 0700.

    Returns True when an existing directory had looser permissions (the caller warns).
    Raises :class:`UnsafeDirectoryError` when ``path`` belongs to another user or is not
    a directory: its contents could have been planted, so nothing in it is trusted.
    """
    path.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeDirectoryError(f"{path} is not a directory")
    if info.st_uid != owner_uid():
        raise UnsafeDirectoryError(f"{path} belongs to user {info.st_uid}, not to this user")
    if stat.S_IMODE(info.st_mode) != DIRECTORY_MODE:
        path.chmod(DIRECTORY_MODE)
        return True
    return False


def trusted_file(info: os.stat_result) -> bool:
    """A regular file of ours that nobody else can write to."""
    return (
        stat.S_ISREG(info.st_mode)
        and info.st_uid == owner_uid()
        and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (0600) through a temporary file and ``os.replace``."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=TEMPORARY_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data`` in hex."""
    return hashlib.sha256(data).hexdigest()


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created 0600 if missing) for the block.

    The lock belongs to the open file, so two threads of one process that each enter
    the block exclude each other as two processes do; a killed holder's lock is freed
    by the kernel.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def remove_quietly(*paths: Path) -> None:
    """Unlink each of ``paths`` that exists (another process may have removed it first)."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
