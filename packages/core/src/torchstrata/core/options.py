"""Compile options: one attrs object passed down the whole pipeline.

Nothing reads environment variables at import time. ``override_options`` changes the
defaults for a block of code (for debugging); explicit arguments to ``compile`` win.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import attrs

from torchstrata.core.stage_options import AutogradOptions, InductorOptions

#: The built-in code generators (None: chosen by device). A backend package registers more
#: through the inductor's ``torchstrata_inductor_backends`` hook; ``codegen`` is checked
#: against the registered names when a graph is compiled.
CODEGENS = (None, "triton", "cpp", "eager")
MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: The default of ``shared_decomposition_from`` (decisions 0280, 0281): a symbolic
#: decomposition costs about six to seven static ones (a 2-layer GPT block's forward and
#: backward: 0.16-0.26 s against 0.025-0.035 s a size, since builders keep the metas
#: inferred on symbolic sizes; ten before) and saves a third of one per later size.
#: Waiting until the sizes decomposed on their own have cost about one symbolic
#: decomposition bounds what an entry with few sizes loses (a rent-or-buy choice).
SHARED_DECOMPOSITION_FROM = 8
#: The default of ``symbolic_lowerings`` (decision 0435): Triton lowers each
#: power-of-two bucket of a row length on its own (0400), a row length of 2..65536 is
#: 16 buckets; measured on the dynamic corpus (bench/results/2026-12-07-cpu-s34-cover2-*).
SYMBOLIC_LOWERINGS = 16


def _check_codegen(instance: Any, attribute: Any, value: Any) -> None:
    # Any backend name: the registered ones are known only to the codegen stage, which
    # names them when this one is not among them.
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError(f"codegen={value!r} must be None or a backend name such as {CODEGENS[1:]}")


def _check_mode(instance: Any, attribute: Any, value: Any) -> None:
    if value not in MODES:
        raise ValueError(f"mode={value!r} is not one of {MODES}")


def _check_size_limit(instance: Any, attribute: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
        raise ValueError(f"cache_size_limit={value!r} must be None or a positive number of bytes")


def _check_positive(instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{attribute.name}={value!r} must be a non-negative int")


def _check_count_from_one(instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(
            f"compile option {attribute.name}={value!r} must be an int, not {type(value).__name__}"
        )
    if value < 1:
        raise ValueError(f"compile option {attribute.name}={value!r} must be 1 or more")


def _check_type(*types: type) -> Any:
    """A validator: the value is of one of ``types`` (``None`` among them for optional
    fields), else a ``TypeError`` naming the option (``True`` is no int here)."""
    names = " or ".join("None" if t is type(None) else t.__name__ for t in types)

    def check(instance: Any, attribute: Any, value: Any) -> None:
        exact_bool = isinstance(value, bool) and bool not in types
        if exact_bool or not isinstance(value, types):
            raise TypeError(
                f"compile option {attribute.name}={value!r} must be {names}, "
                f"not {type(value).__name__}"
            )

    return check


def _source_names(value: Any) -> tuple[str, ...]:
    """``dynamic_sources`` as a tuple of entries: a comma-separated string (as
    ``torch.compiler.config.dynamic_sources``) or a sequence of strings."""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, Iterable) or not all(isinstance(v, str) for v in value):
        raise TypeError(
            f"compile option dynamic_sources={value!r} must be a str or a sequence of str"
        )
    return tuple(entry.strip() for entry in value if entry.strip())


def _plugin_names(value: Any) -> frozenset[str]:
    """``blocked_plugins`` as a frozenset; one bare string is refused (it would block its
    letters)."""
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise TypeError(
            f"compile option blocked_plugins={value!r} must be a collection of plugin "
            "names, not " + type(value).__name__
        )
    names = frozenset(value)
    wrong = sorted(repr(name) for name in names if not isinstance(name, str))
    if wrong:
        raise TypeError(f"compile option blocked_plugins: names must be str, not {wrong}")
    return names


@attrs.frozen
class CompileOptions:
    """Everything that configures one compilation.

    * ``codegen``: None picks by device (Triton on CUDA, C++ on CPU); ``"triton"`` on a
      CPU machine runs kernels under Triton's interpreter; ``"eager"`` skips codegen; any
      other name selects a backend a package registered with the inductor (an unknown
      name fails at compile time with the list of registered ones).
    * ``fullgraph``: raise on a graph break or stage failure instead of running eagerly.
    * ``dynamic``: None compiles a call static first and makes a dimension symbolic on
      its second distinct size; ``True`` symbolic from the first call; ``False``
      specialises every shape (sizes 0 and 1 are always specialised; see the runtime's
      ``dynamic_shapes``). A Python ``int`` argument is treated as a size (decision
      0330).
    * ``dynamic_sources``: sources symbolic from the first call (unless ``dynamic=False``),
      as ``torch.compiler.config.dynamic_sources``: ``"L['n'], L['self'].pos"`` or a
      sequence; each entry a source or a regex (``re.match``), ``:N`` for dimension
      ``N`` of a tensor. The way to mark an ``int`` dynamic (it carries no mark;
      decision 0367).
    * ``mode``: ``"reduce-overhead"`` records CUDA graphs of compiled CUDA forwards;
      ``"max-autotune"`` does the same (Triton launch configurations are autotuned on
      the first call in every mode; there is no more to tune) and says so once;
      ``"max-autotune-no-cudagraphs"`` is ``"default"``, and says so once.
    * ``debug``: verify every graph between passes.
    * ``validate_passes``: run each pass's input and output graphs on random inputs and
      name the pass that changed the results.
    * ``blocked_plugins``: plugin (and pass) names that must not run.
    * ``shared_decomposition_from``: the size a symbolic trace serves from which on its
      sizes take their prims graphs from the trace's one shared decomposition (1: from
      the first; decisions 0280, 0281); the sizes before it decompose their own graphs.
    * ``symbolic_lowering``: a symbolic entry's new size first tries a lowering that
      serves every size meeting the conditions it records (sizes as
      ``core.SizeValue``); where that fails, sizes lower one by one (decision 0381).
      False: always one by one.
    * ``symbolic_lowerings``: how many such lowerings (made or failed) one entry makes
      at most; sizes that none serves after that lower one by one (decision 0435).
    * ``cache_dir``: root of the on-disk cache (None: ``$TORCHSTRATA_CACHE_DIR``, else
      ``$XDG_CACHE_HOME/torchstrata``, else ``~/.cache/torchstrata``; see
      :mod:`torchstrata.core.artifacts`).
    * ``cache_size_limit``: the cache's size cap in bytes, least recently used entries
      evicted above it (None: 1 GiB).
    * ``graph_cache``: keep what autograd, decomposition and code generation made of each
      captured graph in the on-disk cache (namespace ``graphs``), so another process
      that captures the same graph skips those stages (see the runtime's
      ``graph_cache``); False: neither read nor write it (kernels are still cached).
    * ``native_guards``: tensor guards are checked by a small C++ extension
      (built once per machine with the C++ compiler, kept in the on-disk cache; the
      runtime's ``native_guards``, decision 0460); False, or where it cannot be built:
      Python conditions of the same meaning.
    * ``debug_dir``: each compile writes its graphs after every stage and pass, its
      kernels, guards and timings into a new directory under this one (see the runtime's
      ``debug_dump``); None: the logs settings' ``debug_dir``, if any.
    * ``stage_options``: free-form settings for third-party stages, keyed by stage name.
    * ``inductor``, ``autograd``: the typed options of those stages
      (:class:`~torchstrata.core.stage_options.InductorOptions`,
      :class:`~torchstrata.core.stage_options.AutogradOptions`; ``from_env()`` reads the
      documented ``TORCHSTRATA_*`` debugging variables).
    """

    codegen: str | None = attrs.field(default=None, validator=_check_codegen)
    fullgraph: bool = attrs.field(default=False, validator=_check_type(bool))
    dynamic: bool | None = attrs.field(default=None, validator=_check_type(bool, type(None)))
    dynamic_sources: tuple[str, ...] = attrs.field(default=(), converter=_source_names)
    mode: str | None = attrs.field(default=None, validator=_check_mode)
    debug: bool = attrs.field(default=False, validator=_check_type(bool))
    validate_passes: bool = attrs.field(default=False, validator=_check_type(bool))
    blocked_plugins: frozenset[str] = attrs.field(default=frozenset(), converter=_plugin_names)
    recompile_limit: int = attrs.field(default=8, validator=_check_positive)
    shared_decomposition_from: int = attrs.field(
        default=SHARED_DECOMPOSITION_FROM, validator=_check_count_from_one
    )
    symbolic_lowering: bool = attrs.field(default=True, validator=_check_type(bool))
    symbolic_lowerings: int = attrs.field(
        default=SYMBOLIC_LOWERINGS, validator=_check_count_from_one
    )
    cache_dir: str | None = attrs.field(
        default=None, validator=_check_type(str, os.PathLike, type(None))
    )
    cache_size_limit: int | None = attrs.field(default=None, validator=_check_size_limit)
    graph_cache: bool = attrs.field(default=True, validator=_check_type(bool))
    native_guards: bool = attrs.field(default=True, validator=_check_type(bool))
    debug_dir: str | None = attrs.field(
        default=None, validator=_check_type(str, os.PathLike, type(None))
    )
    stage_options: Mapping[str, Any] = attrs.field(factory=dict, validator=_check_type(Mapping))
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
