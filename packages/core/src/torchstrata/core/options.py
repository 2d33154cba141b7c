"""Compile options: one attrs object passed down the whole pipeline.

Nothing reads environment variables at import time. ``override_options`` changes the
defaults for a block of code (for debugging); explicit arguments to ``compile`` win.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

CODEGENS = (None, "triton", "cpp", "eager")
MODES = (None, "default", "reduce-overhead", "max-autotune")


def _check_codegen(instance: Any, attribute: Any, value: Any) -> None:
    if value not in CODEGENS:
        raise ValueError(f"codegen={value!r} is not one of {CODEGENS}")


def _check_mode(instance: Any, attribute: Any, value: Any) -> None:
    if value not in MODES:
        raise ValueError(f"mode={value!r} is not one of {MODES}")


def _check_positive(instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name}={value!r} must be a non-negative int")


@attrs.frozen
class CompileOptions:
    """Everything that configures one compilation.

    * ``codegen``: None picks by device (Triton on CUDA, C++ on CPU); ``"triton"`` on a
      CPU machine runs kernels under Triton's interpreter; ``"eager"`` skips codegen.
    * ``debug``: verify every graph between passes.
    * ``validate_passes``: run each pass's input and output graphs on random inputs and
      name the pass that changed the results.
    * ``blocked_plugins``: plugin (and pass) names that must not run.
    * ``debug_dir``: each compile writes its graphs after every stage and pass, its
      kernels, guards and timings into a new directory under this one (see the runtime's
      ``debug_dump``); None: the logs settings' ``debug_dir``, if any.
    * ``stage_options``: free-form settings for third-party stages, keyed by stage name.
    """

    codegen: str | None = attrs.field(default=None, validator=_check_codegen)
    fullgraph: bool = False
    dynamic: bool | None = None
    mode: str | None = attrs.field(default=None, validator=_check_mode)
    debug: bool = False
    validate_passes: bool = False
    blocked_plugins: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)
    recompile_limit: int = attrs.field(default=8, validator=_check_positive)
    cache_dir: str | None = None
    debug_dir: str | None = None
    stage_options: Mapping[str, Any] = attrs.field(factory=dict)

    def stage(self, name: str) -> Mapping[str, Any]:
        """The options meant for the stage called ``name`` (empty if none)."""
        return self.stage_options.get(name, {})


_CURRENT: contextvars.ContextVar[CompileOptions] = contextvars.ContextVar(
    "torchstrata_options",
    default=CompileOptions(),  # noqa: B039 - frozen attrs instance, immutable
)


def current_options() -> CompileOptions:
    """The defaults in force here (see :func:`override_options`)."""
    return _CURRENT.get()


@contextlib.contextmanager
def override_options(**changes: Any) -> Iterator[CompileOptions]:
    """Within the block, defaults are the current ones with ``changes`` applied."""
    options = attrs.evolve(_CURRENT.get(), **changes)
    token = _CURRENT.set(options)
    try:
        yield options
    finally:
        _CURRENT.reset(token)
