"""The ``torchstrata_capture`` hook: a thin adapter over :func:`torchstrata.capture.capture`."""

from __future__ import annotations

import linecache
import logging
from collections.abc import Callable
from typing import Any

from torchstrata.capture.api import capture
from torchstrata.core import (
    CaptureResult,
    CompileOptions,
    SegmentCompiler,
    artifact_logger,
    hookimpl,
)

graph_breaks_log = artifact_logger(__name__, "graph_breaks")


@hookimpl
def torchstrata_capture(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    options: CompileOptions,
    compile_segment: SegmentCompiler | None,
) -> CaptureResult | None:
    """Capture ``fn(*args, **kwargs)`` by interpreting its bytecode (see ``capture``)."""
    result = capture(fn, args, kwargs, options, compile_segment=compile_segment)
    if result.graph_breaks and graph_breaks_log.isEnabledFor(logging.DEBUG):
        for graph_break in result.graph_breaks:
            line = linecache.getline(graph_break.filename, graph_break.lineno).strip()
            graph_breaks_log.debug(
                "graph break in %s at %s:%d: %s%s",
                getattr(fn, "__qualname__", type(fn).__name__),
                graph_break.filename,
                graph_break.lineno,
                graph_break.reason,
                f"\n    {line}" if line else "",
            )
    return result
