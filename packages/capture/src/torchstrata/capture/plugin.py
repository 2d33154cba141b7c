"""The ``torchstrata_capture`` hook: a thin adapter over :func:`torchstrata.capture.capture`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchstrata.capture.api import capture
from torchstrata.core import CaptureResult, CompileOptions, hookimpl


@hookimpl
def torchstrata_capture(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], options: CompileOptions
) -> CaptureResult | None:
    """Capture ``fn(*args, **kwargs)`` by interpreting its bytecode (see ``capture``)."""
    return capture(fn, args, kwargs, options)
