"""Errors and warnings the runtime raises when compilation cannot go ahead."""

from __future__ import annotations

from typing import Any


class TorchstrataFallbackWarning(UserWarning):
    """The runtime ran (part of) a function eagerly; the message says why."""


class TorchstrataOptionWarning(UserWarning):
    """A compile option was accepted but does less than its name suggests (``dynamic=True``
    before symbolic shapes, ``mode="max-autotune"``); the message says what it does."""


class CompilationError(RuntimeError):
    """Compilation failed where it may not fall back (``fullgraph=True``).

    ``stage`` names where it failed: ``capture``, ``autograd``, ``decomp``, ``codegen``,
    a pass stage such as ``post_decomp``, ``program`` (running the compiled code) or
    ``graph-break``.
    """

    def __init__(self, message: str, *, stage: str | None = None) -> None:
        super().__init__(message)
        self.stage = stage


class StageFailure(Exception):
    """Internal: a stage raised; carries the stage name to the fallback logic."""

    def __init__(self, stage: str, error: BaseException, capture: Any = None) -> None:
        super().__init__(f"{stage} failed: {type(error).__name__}: {error}")
        self.stage = stage
        self.error = error
        #: the CaptureResult when capture succeeded (its guards key the eager decision)
        self.capture = capture
