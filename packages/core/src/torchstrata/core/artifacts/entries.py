"""One entry of the artifact store on disk: where its ``.meta`` is, whether it is sound,
and the access stamp that eviction orders by (see :mod:`.store` for the layout)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from torchstrata.core.artifacts.files import sha256_hex, trusted_file

META_SUFFIX = ".meta"


def meta_path(artifact: Path) -> Path:
    """The ``.meta`` file of the entry whose artifact is ``artifact``."""
    return artifact.with_name(artifact.name.split(".", 1)[0] + META_SUFFIX)


def check(artifact: Path) -> str | None:
    """None for a sound entry, else why not: "missing", "partial" or what is wrong."""
    try:
        with open(meta_path(artifact), "rb") as handle:
            if not trusted_file(os.fstat(handle.fileno())):
                return "its .meta file is not a private file of this user"
            meta = json.loads(handle.read())
    except FileNotFoundError:
        return "partial" if artifact.exists() else "missing"
    except (OSError, ValueError) as error:
        return f"unreadable .meta: {error}"
    if not isinstance(meta, dict) or not isinstance(meta.get("sha256"), str):
        return "malformed .meta"
    try:
        with open(artifact, "rb") as handle:
            if not trusted_file(os.fstat(handle.fileno())):
                return "not a private file of this user"
            data = handle.read()
    except FileNotFoundError:
        return "the artifact is missing"
    except OSError as error:
        return f"unreadable: {error}"
    if len(data) != meta.get("size"):
        return f"{len(data)} bytes where {meta.get('size')} were written (truncated?)"
    if sha256_hex(data) != meta["sha256"]:
        return "its content does not match its SHA-256"
    return None


def recorded_sha256(artifact: Path) -> str | None:
    """The SHA-256 that the entry's ``.meta`` records (None: no readable ``.meta``); not
    a check of the artifact, which :func:`check` makes."""
    try:
        meta = json.loads(meta_path(artifact).read_bytes())
    except (OSError, ValueError):
        return None
    digest = meta.get("sha256") if isinstance(meta, dict) else None
    return digest if isinstance(digest, str) else None


def touch(artifact: Path) -> None:
    """Record an access on the entry's ``.meta`` (an explicit time: ``utime(None)``
    takes the kernel's coarse clock, which would tie entries used milliseconds apart)."""
    now = time.time_ns()
    with contextlib.suppress(OSError):
        os.utime(meta_path(artifact), ns=(now, now))
