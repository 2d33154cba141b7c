"""Compiling generated C++ to shared objects, cached by content, and loading them with ctypes.

One ``g++ -O3 -march=native -fopenmp -shared -fPIC`` per kernel file (plus ``-lmvec``
when the kernel declares glibc's vector math functions, so ``omp simd`` loops over
``exp``/``erf`` vectorise). The standard headers a kernel includes are swapped for the
few declarations it needs (:mod:`torchstrata.inductor.codegen.cpp.prelude`: half the compile
time, with no precompiled header to build on a cold start); a kernel that does not
compile that way is compiled again as written. The shared object is named by the
SHA-256 of the source and the compiler command, stored in ``cache_dir`` (default
``$TORCHSTRATA_CACHE_DIR/cpp``, else ``~/.cache/torchstrata/cpp``) and written
atomically (temporary file, then ``os.replace``), so concurrent processes never see a
half-written library.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import torch

from torchstrata.inductor.codegen.cpp.checks import CheckedKernel, KernelCheck
from torchstrata.inductor.codegen.cpp.prelude import lighten

#: Overrides the root of the default cache directory (read when compiling, not at import).
CACHE_DIR_VARIABLE = "TORCHSTRATA_CACHE_DIR"
#: Changes whenever the prelude that replaces the standard headers changes.
PRELUDE_VERSION = "light-prelude-2"
COMPILER_FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17")
#: Math functions glibc's libmvec may vectorise: name -> number of arguments.
SIMD_MATH_CANDIDATES = {
    "exp": 1,
    "log": 1,
    "sin": 1,
    "cos": 1,
    "pow": 2,
    "acos": 1,
    "asin": 1,
    "atan": 1,
    "atan2": 2,
    "cosh": 1,
    "erf": 1,
    "exp2": 1,
    "expm1": 1,
    "log1p": 1,
    "log2": 1,
    "sinh": 1,
    "tan": 1,
    "tanh": 1,
}


def openmp_link_flags(torch_lib: Path) -> tuple[str, ...]:
    """Link flags that make kernels share torch's OpenMP runtime.

    A torch that bundles ``libgomp.so.1`` (its soname) needs nothing: the loader reuses the
    copy torch loaded. One that bundles a renamed ``libgomp-<hash>.so.1`` would make a
    second runtime load with ours, so kernels link that file by name (``-l:``, rpath) with
    ``--as-needed``, which drops the compiler's own ``-lgomp`` that comes after it.
    """
    renamed = sorted(torch_lib.glob("libgomp-*.so*"))
    if not renamed:
        return ()
    return (
        "-Wl,--as-needed",
        f"-L{torch_lib}",
        f"-l:{renamed[0].name}",
        f"-Wl,-rpath,{torch_lib}",
    )


@functools.cache
def link_flags() -> tuple[str, ...]:
    """:func:`openmp_link_flags` for the installed torch."""
    return openmp_link_flags(Path(torch.__file__).parent / "lib")


class CppCompileError(RuntimeError):
    """The system compiler rejected a generated kernel (the message holds its output)."""


@attrs.frozen
class BuiltKernel:
    """A compiled kernel: its entry point, where it lives, and how long compiling took."""

    fn: Callable[..., None]
    path: str
    compile_seconds: float
    cached: bool


def default_cache_dir() -> Path:
    """``$TORCHSTRATA_CACHE_DIR/cpp`` when that is set (read at each call), else
    ``~/.cache/torchstrata/cpp``."""
    root = os.environ.get(CACHE_DIR_VARIABLE)
    if root:
        return Path(root) / "cpp"
    return Path.home() / ".cache" / "torchstrata" / "cpp"


def find_compiler() -> str:
    """The C++ compiler to use (``g++``, else ``c++``)."""
    for name in ("g++", "c++"):
        path = shutil.which(name)
        if path:
            return path
    raise CppCompileError("no C++ compiler (g++ or c++) found on PATH")


_LOADED: dict[str, ctypes.CDLL] = {}


@functools.cache
def simd_math_functions() -> frozenset[str]:
    """The candidates for which this machine's libmvec has float and double vector variants."""
    try:
        libmvec = ctypes.CDLL("libmvec.so.1")
    except OSError:
        return frozenset()
    found = set()
    for name, arity in SIMD_MATH_CANDIDATES.items():
        v = "v" * arity
        if hasattr(libmvec, f"_ZGVdN8{v}_{name}f") and hasattr(libmvec, f"_ZGVdN4{v}_{name}"):
            found.add(name)
    return frozenset(found)


def cache_key(compiler: str, flags: tuple[str, ...], source: str) -> str:
    """The SHA-256 naming a kernel's library: compiler, flags, prelude version and source."""
    parts = (compiler, *flags, PRELUDE_VERSION, source)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def build_kernel(
    source: str,
    name: str,
    num_args: int,
    cache_dir: str | Path | None = None,
    checks: tuple[KernelCheck, ...] = (),
) -> BuiltKernel:
    """Compile ``source`` (cached) and return its ``extern "C"`` function ``name``.

    The function takes ``num_args`` buffer addresses. A kernel that makes checks
    (``checks``, from :func:`~torchstrata.inductor.codegen.cpp.checks.kernel_checks` of the kernel
    the source was generated from) is wrapped in a
    :class:`~torchstrata.inductor.codegen.cpp.checks.CheckedKernel`, called the same way, which
    raises :class:`IndexError` for an out-of-range index and
    ``RuntimeError("ZeroDivisionError")`` for an integer divisor of zero.
    """
    compiler = find_compiler()
    directory = Path(cache_dir) if cache_dir else default_cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    flags = (*COMPILER_FLAGS, *link_flags())
    digest = cache_key(compiler, flags, source)
    library = directory / f"{name}_{digest[:24]}.so"
    cached = library.exists()
    seconds = 0.0
    if not cached:
        seconds = _compile(compiler, source, library)
    handle = _LOADED.get(str(library))
    if handle is None:
        handle = _LOADED[str(library)] = ctypes.CDLL(str(library))
    fn = getattr(handle, name)
    if not checks:
        fn.argtypes = [ctypes.c_void_p] * num_args
        fn.restype = None
        return BuiltKernel(fn, str(library), seconds, cached)
    # A checking kernel: an error slot, and the number of a failed check back.
    fn.argtypes = [ctypes.c_void_p] * num_args + [ctypes.POINTER(ctypes.c_int64)]
    fn.restype = ctypes.c_int64
    return BuiltKernel(CheckedKernel(fn, name, checks), str(library), seconds, cached)


def compile_command(compiler: str, source_path: Path, output: Path, source: str) -> list[str]:
    """The compiler invocation that builds ``source`` (saved at ``source_path``)."""
    command = [compiler, *COMPILER_FLAGS, str(source_path), "-o", str(output), *link_flags()]
    if "omp declare simd" in source:
        command.append("-lmvec")
    return command


def _compile(compiler: str, source: str, library: Path) -> float:
    """Build ``library`` from ``source``: with the light prelude, else as written."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="torchstrata_cpp_") as work:
        source_path = Path(work) / "kernel.cpp"
        output = Path(work) / "kernel.so"
        attempts = [text for text in (lighten(source), source) if text is not None]
        for text in attempts:
            source_path.write_text(text)
            command = compile_command(compiler, source_path, output, source)
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode == 0:
                break
        else:
            raise CppCompileError(f"{' '.join(command)} failed:\n{result.stderr}")
        fd, temporary = tempfile.mkstemp(dir=library.parent, suffix=".so.tmp")
        os.close(fd)
        shutil.copyfile(output, temporary)
        os.replace(temporary, library)
        library.with_suffix(".cpp").write_text(source)
    return time.perf_counter() - start
