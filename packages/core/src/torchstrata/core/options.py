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

from torchstrata.core.stage_options import AutogradOptions, InductorOptions

#: The built-in code generators (None: chosen by device). A backend package registers more
#: through the inductor's ``torchstrata_inductor_backends`` hook; ``codegen`` is checked
#: against the registered names when a graph is compiled.
CODEGENS = (None, "triton", "cpp", "eager")
MODES = (None, "default", "reduce-overhead", "max-autotune")


def _check_codegen(instance: Any, attribute: Any, value: Any) -> None:
    # Any backend name: the registered ones are known only to the codegen stage, which
    # names them when this one is not among them.
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError(f"codegen={value!r} must be None or a backend name such as {CODEGENS[1:]}")


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
      CPU machine runs kernels under Triton's interpreter; ``"eager"`` skips codegen; any
      other name selects a backend a package registered with the inductor (an unknown
      name fails at compile time with the list of registered ones).
    * ``debug``: verify every graph between passes.
    * ``validate_passes``: run each pass's input and output graphs on random inputs and
      name the pass that changed the results.
    * ``blocked_plugins``: plugin (and pass) names that must not run.
    * ``stage_options``: free-form settings for third-party stages, keyed by stage name.
    * ``inductor``, ``autograd``: the typed options of those stages
      (:class:`~torchstrata.core.stage_options.InductorOptions`,
      :class:`~torchstrata.core.stage_options.AutogradOptions`; ``from_env()`` reads the
      documented ``TORCHSTRATA_*`` debugging variables).
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
    stage_options: Mapping[str, Any] = attrs.field(factory=dict)
    inductor: InductorOptions = attrs.field(
        factory=InductorOptions, validator=attrs.validators.instance_of(InductorOptions)
    )
    autograd: AutogradOptions = attrs.field(
        factory=AutogradOptions, validator=attrs.validators.instance_of(AutogradOptions)
    )

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
