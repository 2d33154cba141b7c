"""Walking the artifact store's directories: the complete entries with their sizes and
access stamps, and the files of none (temporary files, half-written entries)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import attrs

from torchstrata.core.artifacts.entries import META_SUFFIX


@attrs.frozen
class Scanned:
    """A complete entry: its ``.meta``, its artifact, last access and bytes."""

    meta: Path
    artifact: Path
    accessed_ns: int
    size: int


def scanned(stem: str, files: list[os.DirEntry[str]]) -> Scanned | None:
    """The entry ``stem`` made of ``files`` (None unless it has a ``.meta`` and an artifact)."""
    metas = [file for file in files if file.name == stem + META_SUFFIX]
    artifacts = [file for file in files if file.name != stem + META_SUFFIX]
    if not metas or len(artifacts) != 1:
        return None
    try:
        meta_info = metas[0].stat()
        size = meta_info.st_size + artifacts[0].stat().st_size
    except OSError:
        return None
    return Scanned(Path(metas[0].path), Path(artifacts[0].path), meta_info.st_mtime_ns, size)


def remove_stale(files: list[os.DirEntry[str]], before: float) -> None:
    """Unlink those of ``files`` last changed before ``before`` (a temporary file or an
    artifact whose writer died; a younger one may still be being written)."""
    for file in files:
        with contextlib.suppress(OSError):
            if file.stat().st_mtime < before:
                os.unlink(file.path)


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def subdirectories(path: Path) -> list[Path]:
    try:
        return [Path(entry.path) for entry in os.scandir(path) if entry.is_dir()]
    except OSError:
        return []


def files_in(path: Path) -> list[os.DirEntry[str]]:
    try:
        return [entry for entry in os.scandir(path) if entry.is_file(follow_symlinks=False)]
    except OSError:
        return []
