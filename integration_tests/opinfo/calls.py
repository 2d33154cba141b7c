"""A namespace the sweep's one-node torch graphs call into.

Each sample gets a closure ``fn(*tensors)`` that rebuilds the sample's arguments around
its tensor inputs and calls the OpInfo's ``op``. The torch-level node names it by a
dotted path (``<this module>.sample_<n>``), which ``OpRef.resolve`` imports back.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

_COUNTER = itertools.count()


def register(fn: Callable[..., Any]) -> str:
    """Store ``fn`` here under a fresh name; return its dotted path."""
    name = f"sample_{next(_COUNTER)}"
    globals()[name] = fn
    return f"{__name__}.{name}"


def release(path: str) -> None:
    """Forget a registered callable (the sweep registers one per sample)."""
    globals().pop(path.rsplit(".", 1)[1], None)
