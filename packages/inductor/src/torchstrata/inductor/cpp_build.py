"""Compiling generated C++ to shared objects, cached by content, and loading them with ctypes.

One ``g++ -O3 -march=native -fopenmp -shared -fPIC`` per kernel file, with the standard
headers from a precompiled header (``pch_<hash>/ts_prelude.h.gch``: ~0.13 s instead of
~0.4-0.9 s per kernel on a loaded 2-core box) (plus ``-lmvec`` when
the kernel declares glibc's vector math functions, so ``omp simd`` loops over ``exp``/``erf``
vectorise). The shared object is
named by the SHA-256 of the source and the compiler command, stored in ``cache_dir``
(default ``~/.cache/torchstrata/cpp``) and written atomically (temporary file, then
``os.replace``), so concurrent processes never see a half-written library.
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
    """``~/.cache/torchstrata/cpp``."""
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


def build_kernel(
    source: str, name: str, num_args: int, cache_dir: str | Path | None = None
) -> BuiltKernel:
    """Compile ``source`` (cached) and return its ``extern "C"`` function ``name``."""
    compiler = find_compiler()
    directory = Path(cache_dir) if cache_dir else default_cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    flags = (*COMPILER_FLAGS, *link_flags())
    digest = hashlib.sha256("\0".join((compiler, *flags, source)).encode()).hexdigest()
    library = directory / f"{name}_{digest[:24]}.so"
    cached = library.exists()
    seconds = 0.0
    if not cached:
        seconds = _compile(compiler, source, library)
    handle = _LOADED.get(str(library))
    if handle is None:
        handle = _LOADED[str(library)] = ctypes.CDLL(str(library))
    fn = getattr(handle, name)
    fn.argtypes = [ctypes.c_void_p] * num_args
    fn.restype = None
    return BuiltKernel(fn, str(library), seconds, cached)


#: The standard headers every kernel starts with; parsing them is most of a compile, so
#: they come from a precompiled header (built once per compiler and flags).
PRELUDE = "#include <cmath>\n#include <cstdint>\n#include <cstring>\n"
PRELUDE_NAME = "ts_prelude.h"


def precompiled_prelude(compiler: str, cache: Path) -> Path | None:
    """The directory holding ``ts_prelude.h`` and its ``.gch`` (built on first use,
    atomically), or None when the compiler cannot build it (kernels then parse the headers)."""
    key = hashlib.sha256("\0".join((compiler, *COMPILER_FLAGS, PRELUDE)).encode()).hexdigest()
    directory = cache / f"pch_{key[:16]}"
    if (directory / f"{PRELUDE_NAME}.gch").exists():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    (directory / PRELUDE_NAME).write_text(PRELUDE)
    fd, temporary = tempfile.mkstemp(dir=directory, suffix=".gch.tmp")
    os.close(fd)
    flags = [flag for flag in COMPILER_FLAGS if flag != "-shared"]
    command = [compiler, *flags, "-x", "c++-header", str(directory / PRELUDE_NAME)]
    result = subprocess.run([*command, "-o", temporary], capture_output=True, check=False)
    if result.returncode != 0:
        os.unlink(temporary)
        return None
    os.replace(temporary, directory / f"{PRELUDE_NAME}.gch")
    return directory


def _compile(compiler: str, source: str, library: Path) -> float:
    with tempfile.TemporaryDirectory(prefix="torchstrata_cpp_") as work:
        source_path = Path(work) / "kernel.cpp"
        output = Path(work) / "kernel.so"
        prelude = precompiled_prelude(compiler, library.parent) if PRELUDE in source else None
        include: list[str] = []
        if prelude is not None:
            source_path.write_text(source.replace(PRELUDE, f'#include "{PRELUDE_NAME}"\n', 1))
            include = [f"-I{prelude}"]
        else:
            source_path.write_text(source)
        command = [
            compiler,
            *COMPILER_FLAGS,
            *include,
            str(source_path),
            "-o",
            str(output),
            *link_flags(),
        ]
        if "omp declare simd" in source:
            command.append("-lmvec")
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - start
        if result.returncode != 0:
            raise CppCompileError(f"{' '.join(command)} failed:\n{result.stderr}")
        fd, temporary = tempfile.mkstemp(dir=library.parent, suffix=".so.tmp")
        os.close(fd)
        shutil.copyfile(output, temporary)
        os.replace(temporary, library)
        library.with_suffix(".cpp").write_text(source)
    return seconds
