"""The user-facing functions: ``compile``, ``explain`` and ``reset``."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import torch

from torchstrata.core import CompileOptions, current_options
from torchstrata.runtime.cache import clear_all_caches
from torchstrata.runtime.compiled import CompiledFunction, CompiledModule
from torchstrata.runtime.distributed import compile_distributed
from torchstrata.runtime.dynamo_explain import explain_dynamo, is_dynamo_compiled
from torchstrata.runtime.errors import TorchstrataOptionWarning
from torchstrata.runtime.explain import ExplainReport, explain_call
from torchstrata.runtime.fallback import clear_warnings, warn_once
from torchstrata.runtime.pipeline import Pipeline

_DEFAULT_PIPELINE = Pipeline()


def resolve_options(
    options: CompileOptions | Mapping[str, Any] | None, **explicit: Any
) -> CompileOptions:
    """``options`` (or a dict of its fields) over ``current_options()``; explicit keyword
    arguments that are set (not None / not False) win."""
    base = current_options()
    if options is None:
        resolved = base
    elif isinstance(options, CompileOptions):
        resolved = options
    elif isinstance(options, Mapping):
        known = attrs.fields_dict(CompileOptions)
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise TypeError(f"unknown compile option(s) {unknown}; known: {sorted(known)}")
        resolved = attrs.evolve(base, **options)
    else:
        raise TypeError(f"options must be a CompileOptions or a dict, not {type(options).__name__}")
    changes = {
        name: value
        for name, value in explicit.items()
        if value is not None and (value is not False or name == "dynamic")
    }
    return attrs.evolve(resolved, **changes) if changes else resolved


#: What each option value that does less than its name says does instead.
_OPTION_NOTES = {
    ("mode", "max-autotune"): (
        "mode='max-autotune' records CUDA graphs as 'reduce-overhead' does; there is no "
        "more autotuning than in every mode (Triton launch configurations are timed on "
        "the first call; matmuls and convolutions run in ATen, C++ kernels are not tuned)"
    ),
    ("mode", "max-autotune-no-cudagraphs"): (
        "mode='max-autotune-no-cudagraphs' compiles as mode='default': there is no more "
        "autotuning than in every mode (Triton launch configurations are timed on the first "
        "call; matmuls and convolutions run in ATen, C++ kernels are not tuned)"
    ),
}


def _note_options(options: CompileOptions) -> None:
    """Warn once for each option value that does less than its name says."""
    for (name, value), note in _OPTION_NOTES.items():
        if getattr(options, name) == value and type(getattr(options, name)) is type(value):
            warn_once(
                ("option", name, value), note, category=TorchstrataOptionWarning, stacklevel=4
            )


def compile(
    fn_or_module: Callable[..., Any] | None = None,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    codegen: str | None = None,
    mode: str | None = None,
    options: CompileOptions | Mapping[str, Any] | None = None,
    pipeline: Pipeline | None = None,
) -> Any:
    """Compile a function or ``nn.Module``; the result behaves like the original.

    A function gives a :class:`CompiledFunction`; a module gives a
    :class:`CompiledModule` whose ``forward`` is compiled (the original module stays
    usable and its parameters may change between calls). Without ``fn_or_module``,
    returns a decorator. Compilation happens on the first call for each guard set.

    :param fullgraph: raise :class:`CompilationError` on a graph break or stage failure
        instead of falling back to eager.
    :param dynamic: ``None``: a dimension becomes symbolic on the second distinct size a
        compile sees; ``True``: symbolic from the first call; ``False``: every shape
        specialised (decisions 0200, 0205-0208: CPU and CUDA graphs, training and graph
        breaks included; under ``mode="reduce-overhead"`` one CUDA graph per size over
        one lowering, 0456; distributed pipelines specialise and log why).
    :param codegen: ``None`` (by device), ``"triton"``, ``"cpp"`` or ``"eager"`` (stop
        at ATen graphs, run them in the reference interpreter).
    :param mode: ``None``/``"default"``; ``"reduce-overhead"`` (CUDA graphs of compiled
        CUDA forwards, one per size with symbolic sizes); ``"max-autotune"`` (the same, and a warning that there is no
        further tuning) or ``"max-autotune-no-cudagraphs"`` (as default, with that
        warning).
    :param options: a :class:`~torchstrata.core.CompileOptions` or a dict of its fields;
        defaults come from :func:`torchstrata.core.current_options`.
    :param pipeline: the :class:`Pipeline` to use (tests inject fake stages this way).
    :raises TypeError: ``fn_or_module`` is not callable, or an option (an argument or
        a key of ``options``) is unknown or of the wrong type; the message names it.
    :raises ValueError: a bad ``codegen``, ``mode`` or ``recompile_limit`` value.
    """
    try:
        resolved = resolve_options(
            options, fullgraph=fullgraph, dynamic=dynamic, codegen=codegen, mode=mode
        )
    except ValueError as error:
        raise ValueError(f"torchstrata.runtime.compile: {error}") from None
    except TypeError as error:
        raise TypeError(f"torchstrata.runtime.compile: {error}") from None
    _note_options(resolved)
    if pipeline is not None and not isinstance(pipeline, Pipeline):
        raise TypeError(f"pipeline must be a Pipeline, not {type(pipeline).__name__}")
    if fn_or_module is None:
        return functools.partial(compile, options=resolved, pipeline=pipeline)
    if not callable(fn_or_module):
        raise TypeError(
            f"torchstrata.runtime.compile expects a function or nn.Module, got "
            f"{type(fn_or_module).__name__}"
        )
    chosen = pipeline or _DEFAULT_PIPELINE
    if isinstance(fn_or_module, CompiledModule):
        fn_or_module = fn_or_module._orig_mod
    distributed = compile_distributed(fn_or_module, resolved, chosen)
    if distributed is not None:
        return distributed
    if isinstance(fn_or_module, torch.nn.Module):
        return CompiledModule(
            fn_or_module, CompiledFunction(fn_or_module.forward, resolved, chosen)
        )
    if isinstance(fn_or_module, CompiledFunction):
        fn_or_module = fn_or_module.fn
    return CompiledFunction(fn_or_module, resolved, chosen)


def explain(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> ExplainReport:
    """Compile ``fn`` for this call afresh and report graphs, graph breaks (reason and
    source location), guards, ops per graph, kernels and ops left to eager.

    ``fn`` may be a plain function, an ``nn.Module`` or what :func:`compile` returned
    (then its options and pipeline are used). The in-memory caches are neither read nor
    written; the on-disk compiled-graph cache is, as by a compile (the report's
    ``graph_cache`` says what came from it). The function is not run. What Dynamo returned for the torchstrata backend
    is reported by :func:`~torchstrata.runtime.explain_dynamo` (which runs it).

    For a compiled function whose dynamic-shape policy would compile this call with
    symbolic dims (``dynamic=True``, marks, a second size), the guards are those of that
    symbolic entry (each symbol >= 2, the size relations the trace relied on); graphs and
    kernels are those lowered for this call's sizes.
    """
    if is_dynamo_compiled(fn):
        return explain_dynamo(fn, *args, **kwargs)
    options, pipeline = current_options(), _DEFAULT_PIPELINE
    compiled: CompiledFunction | None = None
    if isinstance(fn, CompiledModule):
        fn = fn.compiled_forward
    if isinstance(fn, CompiledFunction):
        compiled = fn
        options, pipeline, fn = fn.options, fn.pipeline, fn.fn
    elif isinstance(fn, torch.nn.Module):
        fn = fn.forward
    if not callable(fn):
        raise TypeError(f"explain expects a function or nn.Module, got {type(fn).__name__}")
    symbolic = _symbolic_plan(compiled, args, kwargs) if compiled is not None else {}
    report = explain_call(pipeline, options, fn, args, kwargs, symbolic)
    if compiled is None:
        return report
    return attrs.evolve(
        report,
        guard_failures=tuple(compiled.guard_failures(args, kwargs)),
        recompile_reasons=tuple(compiled.recompile_reasons),
    )


def _symbolic_plan(
    compiled: CompiledFunction, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, tuple[int, ...]]:
    """The dims a compile of this call would make symbolic (``dynamic``, marks, the
    sizes compiles have seen), the compiled function's policy left as it is."""
    try:
        frame = compiled._bind(args, kwargs)
    except TypeError:
        return {}
    return copy.deepcopy(compiled.dynamic).plan(frame, compiled._globals)


def reset() -> None:
    """Clear every in-memory cache (compiled entries, warn-once memory)."""
    clear_all_caches()
    clear_warnings()
