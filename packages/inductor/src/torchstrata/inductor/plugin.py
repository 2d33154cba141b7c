"""The inductor stage as a plugin: its hookspecs, its built-in backends, and the
``torchstrata_codegen`` hook (a thin adapter over :func:`compile_with`).

Core's historic ``torchstrata_addhooks`` adds the inductor's hookspecs to each plugin
manager and registers a :class:`CodegenStage` bound to that manager, so the codegen hook
can ask the manager which backends are registered.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import pluggy
import torch

from torchstrata.core import CompiledGraph, CompileOptions, Graph, GraphContract, hookimpl
from torchstrata.core.artifacts import CacheSettings, open_store
from torchstrata.inductor import hookspecs
from torchstrata.inductor.codegen.cpp.build import cache_identity
from torchstrata.inductor.codegen.registry import (
    BackendSpec,
    builtin_backends,
    choose_backend,
    registered_backends,
)
from torchstrata.inductor.compile import compile_with, load_compiled
from torchstrata.inductor.launch.package import FORMAT as PACKAGE_FORMAT
from torchstrata.inductor.launch.triton_launch import DirectLaunch

#: The name the codegen stage is registered under.
STAGE_NAME = "inductor.codegen"


class CodegenStage:
    """The ``torchstrata_codegen`` hook of one plugin manager.

    ``trylast``: it is registered while the manager is set up, after every plugin found
    then, so without it the built-in stage would run before a third-party codegen plugin
    (which still may add ``tryfirst=True`` to be sure to come first).
    """

    def __init__(self, manager: pluggy.PluginManager) -> None:
        self.manager = manager

    @hookimpl(trylast=True)
    def torchstrata_codegen(
        self, graph: Graph, device: torch.device, options: CompileOptions, contract: GraphContract
    ) -> CompiledGraph | None:
        """Compile a prims graph with the registered backend ``options.codegen`` names;
        None for a backend that runs eagerly (``codegen="eager"``)."""
        backend = choose_backend(device, options, registered_backends(self.manager))
        if backend is None:
            return None
        return compile_with(graph, backend, options, contract)

    @hookimpl(trylast=True)
    def torchstrata_codegen_load(
        self, package: Mapping[str, Any], device: torch.device, options: CompileOptions
    ) -> CompiledGraph | None:
        """A compiled graph from a package :func:`compile_with` made; None for a package
        of another format or of a backend not registered here."""
        if package.get("format") != PACKAGE_FORMAT:
            return None
        spec = registered_backends(self.manager).get(package.get("backend", ""))
        if spec is None:
            return None
        backend = spec.create(device, options)
        if backend is None:  # a backend that runs eagerly saves nothing to load
            return None
        return load_compiled(package, backend, options)


@hookimpl
def torchstrata_cache_key(options: CompileOptions) -> str:
    """What the generated code depends on beyond the versions and options: the C++
    compiler and its version, the host CPU and the vector math functions it has."""
    return cache_identity()


@hookimpl
def torchstrata_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    """Add the inductor's hookspecs and its codegen stage to ``pluginmanager``."""
    pluginmanager.add_hookspecs(hookspecs)
    if pluginmanager.get_plugin(STAGE_NAME) is None:
        pluginmanager.register(CodegenStage(pluginmanager), name=STAGE_NAME)


@hookimpl
def torchstrata_inductor_backends() -> tuple[BackendSpec, ...]:
    """The built-in backends: ``cpp``, ``triton`` and ``eager``."""
    return builtin_backends()


@hookimpl
def torchstrata_direct_launch(
    kernel: Any,
    grid: tuple[int, ...],
    constants: dict[str, Any],
    fallback: Callable[..., None],
    options: CompileOptions | None = None,
) -> Callable[..., None]:
    """A :class:`~torchstrata.inductor.launch.triton_launch.DirectLaunch` of ``kernel``
    (the runtime's unit-gradient scaling launches its kernel this way). Its compile
    reads and writes Triton's files through the verified store of ``options``
    (decision 0091), as the inductor's own kernels do."""
    from torchstrata.inductor.codegen.triton.verified_cache import verified_triton_cache

    options = options if options is not None else CompileOptions()
    store = open_store(CacheSettings.resolve(options.cache_dir, options.cache_size_limit))
    scope = functools.partial(verified_triton_cache, store)
    return DirectLaunch(kernel, grid, constants, fallback, compile_scope=scope)
