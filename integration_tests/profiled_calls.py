"""Which Python functions a call runs, for tests of the call path's shape (what a warm
call goes through, what it no longer goes through)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import CodeType
from typing import Any


def python_calls(call: Callable[[], Any], where: Callable[[CodeType], bool]) -> list[str]:
    """The qualified names (``co_qualname``) of the Python functions ``call()`` runs whose
    code ``where`` accepts, in the order they are entered (``sys.setprofile``'s ``call``
    events: C functions are not seen). The profiler is removed however ``call`` ends."""
    seen: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and where(frame.f_code):
            seen.append(frame.f_code.co_qualname)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen
