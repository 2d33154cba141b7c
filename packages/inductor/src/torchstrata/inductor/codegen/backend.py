"""The backend interface, and the C++ backend (generate, compile, launch with ctypes)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs
import torch

from torchstrata.core import CompileOptions, GraphPass, InductorOptions, KernelInfo, SizeValue
from torchstrata.inductor.codegen.cpp.build import (
    KernelSource,
    build_kernels,
    canonical_of,
    simd_math_functions,
)
from torchstrata.inductor.codegen.cpp.checks import kernel_checks
from torchstrata.inductor.codegen.cpp.columns import uses_column_loop
from torchstrata.inductor.codegen.cpp.exprs import supports as cpp_supports
from torchstrata.inductor.codegen.cpp.generate import generate_cpp
from torchstrata.inductor.codegen.cpp.records import kernel_from_record, kernel_record
from torchstrata.inductor.codegen.cpp.row_sizes import size_arguments
from torchstrata.inductor.codegen.flat_rows import flatten_reduced, flatten_rows
from torchstrata.inductor.codegen.half_roundings import drop_half_roundings
from torchstrata.inductor.codegen.reciprocals import hoist_reciprocals
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.launch.launcher import KernelLaunch
from torchstrata.inductor.passes.graph_passes import ChannelsLastConvolutions
from torchstrata.inductor.schedule.plan_passes import PlanPass


@attrs.frozen
class BuiltLaunch:
    """A kernel ready to launch, its report entry and what building it cost."""

    launch: KernelLaunch
    info: KernelInfo
    compile_seconds: float = 0.0
    #: plain data (JSON types) from which the backend's ``load_kernels`` loads this
    #: kernel again without its IR; None: it cannot (the graph is then not saved in the
    #: compiled-graph cache, see :mod:`torchstrata.inductor.launch.package`)
    record: Mapping[str, Any] | None = None


class Backend(Protocol):
    """A code generator for fused kernels.

    A backend may also define ``build_all(kernels, options) -> list[BuiltLaunch]``, which
    :func:`build_all` prefers: the whole graph's kernels at once (the C++ backend compiles
    them in parallel and builds identical ones once); and ``load_kernels(records,
    options) -> (handles, paths)``, which loads kernels from the ``record`` of their
    :class:`BuiltLaunch` (a graph of a backend without it is not kept in the
    compiled-graph cache)."""

    name: str

    def supports(self, prim: str, dtype: torch.dtype) -> bool:
        """Can prims.``prim`` on ``dtype`` operands be generated?"""
        ...

    def graph_passes(self) -> Sequence[GraphPass]:
        """Graph rewrites before lowering that this backend wants beyond the common ones."""
        ...

    def plan_passes(self) -> Sequence[PlanPass]:
        """Rewrites of the plan's steps that this backend wants, in order."""
        ...

    def build(self, kernel: Kernel, options: CompileOptions) -> BuiltLaunch:
        """Generate, compile and load ``kernel``."""
        ...


def _ctypes_call(handle: str, args: Sequence[str], sizes: Sequence[int | SizeValue] = ()) -> str:
    """The launcher's call of a C++ kernel: buffer addresses, then its sizes as literals
    (the launcher is generated per size; the kernel may serve several), or in a symbolic
    lowering as expressions of the symbols the launcher binds (decisions 0381, 0382)."""
    return f"{handle}({', '.join([*(arg + '.data_ptr()' for arg in args), *map(str, sizes)])})"


class CppBackend:
    """Plain C++ with OpenMP, compiled by the system compiler and loaded with ctypes;
    ``options``: the switches it reads (``reciprocals``, ``half_roundings``)."""

    name = "cpp"

    def __init__(self, options: InductorOptions | None = None) -> None:
        self.options = options if options is not None else InductorOptions()

    def supports(self, prim: str, dtype: torch.dtype) -> bool:
        """See :class:`Backend`."""
        return cpp_supports(prim, dtype)

    def graph_passes(self) -> Sequence[GraphPass]:
        """CPU convolutions on channels-last operands (the C++ backend walks long
        columns itself: no split sums)."""
        return (ChannelsLastConvolutions(),)

    def plan_passes(self) -> Sequence[PlanPass]:
        """None: a kernel call costs no more than a function call in C++."""
        return ()

    def generate(self, kernel: Kernel, simd_functions: frozenset[str] | None = None) -> str:
        """The C++ source of ``kernel``, as :meth:`build` compiles it; ``simd_functions``:
        the math functions with vector variants (default: this machine's libmvec's)."""
        if simd_functions is None:
            simd_functions = simd_math_functions()
        return generate_cpp(self._rewritten(kernel), simd_functions)

    def _rewritten(self, kernel: Kernel) -> Kernel:
        if not uses_column_loop(kernel):  # contiguous leading row dims as one outer loop
            kernel = flatten_rows(kernel)
            if len(kernel.red_shape) >= 2:  # and contiguous reduced dims as one: ``red_len``
                flat = flatten_reduced(kernel)  # (a full sum over ``[T, C]``, decision 0310)
                kernel = flat if not uses_column_loop(flat) else kernel
        else:  # contiguous reduced dims as one, whose length the kernel takes as an argument
            flat = flatten_reduced(kernel)
            kernel = flat if uses_column_loop(flat) else kernel
        if not self.options.half_roundings:
            kernel = drop_half_roundings(kernel)
        return hoist_reciprocals(kernel) if self.options.reciprocals else kernel

    def build(self, kernel: Kernel, options: CompileOptions) -> BuiltLaunch:
        """See :class:`Backend`; contiguous leading row dims are walked as one
        (:func:`~torchstrata.inductor.codegen.flat_rows.flatten_rows`), divisions by
        per-row values become multiplications (``reciprocals``)."""
        (built,) = self.build_all([kernel], options)
        return built

    def build_all(self, kernels: Sequence[Kernel], options: CompileOptions) -> list[BuiltLaunch]:
        """:meth:`build` for each of ``kernels``: all compiled first (in parallel, each
        distinct kernel once, see :func:`~torchstrata.inductor.codegen.cpp.build.build_kernels`),
        then loaded."""
        simd_functions = simd_math_functions()
        kernels = [self._rewritten(kernel) for kernel in kernels]
        sources = [generate_cpp(kernel, simd_functions) for kernel in kernels]
        sizes = [size_arguments(kernel) for kernel in kernels]
        requests = [
            KernelSource(
                source, kernel.name, len(kernel.args), kernel_checks(kernel), None, len(size)
            )
            for kernel, source, size in zip(kernels, sources, sizes, strict=True)
        ]
        # renamed once, for the build and for the compiled-graph cache's record
        requests = [attrs.evolve(r, canonical=canonical_of(r)) for r in requests]
        builds = build_kernels(requests, options.cache_dir, options.cache_size_limit)
        launches = []
        for kernel, source, built, request, size in zip(
            kernels, sources, builds, requests, sizes, strict=True
        ):
            info = KernelInfo(kernel.name, self.name, source, built.path, kernel.ops)
            launch = KernelLaunch(kernel, built.fn, functools.partial(_ctypes_call, sizes=size))
            record = kernel_record(request)
            launches.append(BuiltLaunch(launch, info, built.compile_seconds, record))
        return launches

    def load_kernels(
        self, records: Sequence[Mapping[str, Any]], options: CompileOptions
    ) -> tuple[list[Any], list[str | None]]:
        """The entry points of kernels saved by :func:`kernel_record` (their libraries
        from the kernel cache, compiled again if evicted), and their libraries' paths."""
        requests = [kernel_from_record(record) for record in records]
        builds = build_kernels(requests, options.cache_dir, options.cache_size_limit)
        return [built.fn for built in builds], [built.path for built in builds]


def build_all(
    backend: Backend, kernels: Sequence[Kernel], options: CompileOptions
) -> list[BuiltLaunch]:
    """``backend.build`` of each kernel, through the backend's ``build_all`` when it has
    one (a batch it may compile in parallel and deduplicate)."""
    batch = getattr(backend, "build_all", None)
    if batch is not None:
        return list(batch(kernels, options))
    return [backend.build(kernel, options) for kernel in kernels]
