"""The backend interface, and the C++ backend (generate, compile, launch with ctypes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs
import torch

from torchstrata.core import CompileOptions, KernelInfo
from torchstrata.inductor.cpp_build import KernelSource, build_kernels, simd_math_functions
from torchstrata.inductor.cpp_checks import kernel_checks
from torchstrata.inductor.cpp_codegen import generate_cpp
from torchstrata.inductor.cpp_exprs import supports as cpp_supports
from torchstrata.inductor.kernel import Kernel
from torchstrata.inductor.launcher import KernelLaunch
from torchstrata.inductor.reciprocals import hoist_reciprocals


@attrs.frozen
class BuiltLaunch:
    """A kernel ready to launch, its report entry and what building it cost."""

    launch: KernelLaunch
    info: KernelInfo
    compile_seconds: float = 0.0


class Backend(Protocol):
    """A code generator for fused kernels.

    A backend may also define ``build_all(kernels, options) -> list[BuiltLaunch]``, which
    :func:`build_all` prefers: the whole graph's kernels at once (the C++ backend compiles
    them in parallel and builds identical ones once)."""

    name: str

    def supports(self, prim: str, dtype: torch.dtype) -> bool:
        """Can prims.``prim`` on ``dtype`` operands be generated?"""
        ...

    def build(self, kernel: Kernel, options: CompileOptions) -> BuiltLaunch:
        """Generate, compile and load ``kernel``."""
        ...


def _ctypes_call(handle: str, args: Sequence[str]) -> str:
    return f"{handle}({', '.join(arg + '.data_ptr()' for arg in args)})"


class CppBackend:
    """Plain C++ with OpenMP, compiled by the system compiler and loaded with ctypes."""

    name = "cpp"

    def supports(self, prim: str, dtype: torch.dtype) -> bool:
        """See :class:`Backend`."""
        return cpp_supports(prim, dtype)

    def build(self, kernel: Kernel, options: CompileOptions) -> BuiltLaunch:
        """See :class:`Backend`; divisions by per-row values become multiplications
        (``reciprocals``)."""
        (built,) = self.build_all([kernel], options)
        return built

    def build_all(self, kernels: Sequence[Kernel], options: CompileOptions) -> list[BuiltLaunch]:
        """:meth:`build` for each of ``kernels``: all compiled first (in parallel, each
        distinct kernel once, see :func:`~torchstrata.inductor.cpp_build.build_kernels`),
        then loaded."""
        kernels = [hoist_reciprocals(kernel) for kernel in kernels]
        sources = [generate_cpp(kernel, simd_math_functions()) for kernel in kernels]
        requests = [
            KernelSource(source, kernel.name, len(kernel.args), kernel_checks(kernel))
            for kernel, source in zip(kernels, sources, strict=True)
        ]
        builds = build_kernels(requests, options.cache_dir, options.cache_size_limit)
        launches = []
        for kernel, source, built in zip(kernels, sources, builds, strict=True):
            info = KernelInfo(kernel.name, self.name, source, built.path, kernel.ops)
            launch = KernelLaunch(kernel, built.fn, _ctypes_call)
            launches.append(BuiltLaunch(launch, info, built.compile_seconds))
        return launches


def build_all(
    backend: Backend, kernels: Sequence[Kernel], options: CompileOptions
) -> list[BuiltLaunch]:
    """``backend.build`` of each kernel, through the backend's ``build_all`` when it has
    one (a batch it may compile in parallel and deduplicate)."""
    batch = getattr(backend, "build_all", None)
    if batch is not None:
        return list(batch(kernels, options))
    return [backend.build(kernel, options) for kernel in kernels]
