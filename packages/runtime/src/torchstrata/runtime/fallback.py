"""Saying why something ran eagerly: warnings issued once per key."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Hashable

from torchstrata.runtime.errors import TorchstrataFallbackWarning

_WARNED: set[Hashable] = set()
_LOCK = threading.Lock()


def warn_once(
    key: Hashable,
    message: str,
    *,
    stacklevel: int = 3,
    category: type[Warning] = TorchstrataFallbackWarning,
) -> bool:
    """Issue ``message`` as a ``category`` warning the first time ``key`` is seen (until
    :func:`clear_warnings`). Returns whether it warned."""
    with _LOCK:
        if key in _WARNED:
            return False
        _WARNED.add(key)
    warnings.warn(message, category, stacklevel=stacklevel)
    return True


def clear_warnings() -> None:
    """Forget which warnings were issued, so they are issued again."""
    with _LOCK:
        _WARNED.clear()
