"""Compiling generated C++ to shared objects, cached by content, and loading them with ctypes.

One ``$CXX -O3 -march=native -fno-math-errno -fno-exceptions -fopenmp -shared -fPIC`` per
distinct kernel (``$CXX`` defaults to ``g++``, else ``c++``; plus ``-lmvec`` when the kernel
declares glibc's vector math functions, so ``omp simd`` loops over ``exp``/``erf``
vectorise). ``-fno-math-errno`` (no kernel reads ``errno``; every result stays bit for
bit the same) lets ``omp simd`` loops over ``sqrt`` vectorise: with ``errno`` GCC
calls ``sqrtf`` for each negative operand, and a channels-last batch norm's
``1 / sqrt(var + eps)`` per channel, along the inner loop, ran scalar (decision 0231).
``-fno-exceptions`` (no kernel throws or catches): a parallel region compiled with
exceptions refers to ``__gxx_personality_v0``, so its library links libstdc++, which
doubled the link (~18 ms a kernel, a third of a small kernel's build: decision 0390).
The standard headers a kernel includes are swapped for the few declarations it needs
(:mod:`torchstrata.inductor.codegen.cpp.prelude`: half the compile time, with no precompiled
header to build on a cold start); a kernel that does not compile that way is compiled
again as written.

Kernels are cached in the artifact store of :mod:`torchstrata.core.artifacts` (namespace
``cpp``), keyed by the SHA-256 of their canonical source (:func:`canonical_source`: the
names taken from graph nodes renamed, so the same kernel of sixteen identical layers is
one entry and one build), the compiler command and version, the flags, the prelude
version and the host CPU (``-march=native``). The store checks each library's content
hash before it is loaded, so a truncated or corrupted file is rebuilt, never
``dlopen``-ed. :func:`build_kernels` compiles a graph's missing kernels in a thread pool
sized to the cores (each compile is a subprocess), then loads them all.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import hashlib
import os
import platform
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import torch

from torchstrata.core.artifacts import ArtifactStore, CacheSettings, canonical_source, open_store
from torchstrata.core.cxx_compiler import CxxCompiler, CxxCompilerError, find_cxx
from torchstrata.inductor.codegen.cpp.checks import CheckedKernel, KernelCheck
from torchstrata.inductor.codegen.cpp.prelude import lighten

#: Changes whenever the prelude that replaces the standard headers changes.
PRELUDE_VERSION = "light-prelude-2"
COMPILER_FLAGS = (
    "-O3",
    "-march=native",
    "-fno-math-errno",
    "-fno-exceptions",
    "-fopenmp",
    "-shared",
    "-fPIC",
    "-std=c++17",
)
#: The artifact store's namespace for kernel libraries.
CACHE_NAMESPACE = "cpp"
#: Every kernel's entry point in its canonical source is ``ts_kernel_<hash of the text>``.
CANONICAL_ENTRY = "ts_kernel"
#: The prefixes of the identifiers that the C++ and Triton generators derive from graph
#: node names (``buf_<node>``, ``acc_<reduction>``, ...): renamed in canonical sources.
#: A prefix missing here costs sharing between identical layers, never correctness.
GENERATED_PREFIXES = (
    *("buf_", "acc_", "block_", "nan_", "red_", "part_", "chunk_", "new_", "oob_"),
    *("val_", "safe_", "rsafe_", "psafe_", "scale_", "term_", "masked_", "rescaled_"),
    *("wm2_", "wmean_", "wn_", "wk_", "wv_", "wstep_", "delta_", "ahead_", "all_"),
)
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
    """A compiled kernel: its entry point, where it lives, and how long compiling took
    (0 and ``cached`` when its library came from the cache or from an identical kernel)."""

    fn: Callable[..., None]
    path: str
    compile_seconds: float
    cached: bool


@attrs.frozen
class KernelSource:
    """One kernel to build: its C++ ``source``, whose ``extern "C"`` function ``name``
    takes ``num_args`` buffer addresses then ``num_sizes`` ``int64_t`` sizes, and the
    ``checks`` it makes (see :func:`build_kernels`)."""

    source: str
    name: str
    num_args: int
    checks: tuple[KernelCheck, ...] = ()
    #: :func:`canonical_source` of ``source`` (text, entry point) when known already (a
    #: kernel read back from the compiled-graph cache): renaming costs milliseconds per
    #: kernel, most of loading a cached graph's kernels
    canonical: tuple[str, str] | None = None
    #: ``int64_t`` arguments after the buffers (the outer loop's trip count, ``rows``)
    num_sizes: int = 0


#: The C++ compiler (``core.cxx_compiler``, shared with the runtime's native guards).
Compiler = CxxCompiler


def find_compiler(cxx: str | None = None) -> Compiler:
    """The compiler ``cxx`` names (default: ``$CXX``, read now), else ``g++``, else ``c++``."""
    try:
        return find_cxx(cxx)
    except CxxCompilerError as error:
        raise CppCompileError(str(error)) from error


@functools.cache
def host_fingerprint() -> str:
    """The machine and its CPU's feature flags: ``-march=native`` builds for them, so a
    cache shared between machines never hands one the other's instructions."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as handle:
            flags = next((line for line in handle if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return f"{platform.machine()} {hashlib.sha256(flags.encode()).hexdigest()[:16]}"


def cache_identity() -> str:
    """What C++ kernels depend on besides their source: the compiler (``$CXX`` read now)
    and its version, the flags, the prelude version, the host CPU and its vector math
    functions ("no C++ compiler" when there is none)."""
    try:
        compiler = find_compiler()
    except CppCompileError:
        return "no C++ compiler"
    parts = (*compiler.command, compiler.version, *COMPILER_FLAGS, PRELUDE_VERSION)
    return " ".join((*parts, host_fingerprint(), *sorted(simd_math_functions())))


#: Libraries loaded in this process, by key; and the entries of each store already
#: verified and loaded here, by (root, key), which later graphs take without reading
#: and hashing the file again.
_LOADED: dict[str, ctypes.CDLL] = {}
_KNOWN: dict[tuple[Path, str], Path] = {}
_LOADED_LOCK = threading.Lock()


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


def cache_key(compiler: Compiler, flags: tuple[str, ...], source: str) -> str:
    """The SHA-256 naming a kernel's library: compiler command and version, flags, the
    prelude version, the host CPU and the (canonical) source."""
    parts = (*compiler.command, compiler.version, *flags, PRELUDE_VERSION, host_fingerprint())
    return hashlib.sha256("\0".join((*parts, source)).encode()).hexdigest()


def build_kernel(
    source: str,
    name: str,
    num_args: int,
    cache_dir: str | Path | None = None,
    checks: tuple[KernelCheck, ...] = (),
    size_limit: int | None = None,
) -> BuiltKernel:
    """Compile ``source`` (cached) and return its ``extern "C"`` function ``name``: one
    kernel of :func:`build_kernels`."""
    (built,) = build_kernels([KernelSource(source, name, num_args, checks)], cache_dir, size_limit)
    return built


def build_kernels(
    kernels: Sequence[KernelSource],
    cache_dir: str | Path | None = None,
    size_limit: int | None = None,
) -> list[BuiltKernel]:
    """Compile ``kernels`` (each distinct canonical source once, those not cached in
    parallel), then load them; one :class:`BuiltKernel` per kernel, in order.

    ``cache_dir`` and ``size_limit`` are ``CompileOptions.cache_dir`` and
    ``cache_size_limit`` (None: the defaults, see :class:`CacheSettings`). A kernel that
    makes checks (``checks``, from :func:`~torchstrata.inductor.codegen.cpp.checks.kernel_checks`
    of the kernel the source was generated from) is wrapped in a
    :class:`~torchstrata.inductor.codegen.cpp.checks.CheckedKernel`, called the same way, which
    raises :class:`IndexError` for an out-of-range index and
    ``RuntimeError("ZeroDivisionError")`` for an integer divisor of zero.
    """
    store = open_store(CacheSettings.resolve(cache_dir, size_limit))
    compiler = find_compiler()
    flags = (*COMPILER_FLAGS, *link_flags())
    canonical = [canonical_of(kernel) for kernel in kernels]
    keys = [cache_key(compiler, flags, text) for text, _ in canonical]
    distinct = dict(zip(keys, (text for text, _ in canonical), strict=True))

    def library(key: str) -> tuple[Path, float]:
        return _library(store, compiler, key, distinct[key])

    with _LOADED_LOCK:
        libraries = {
            key: (_KNOWN[store.root, key], 0.0) for key in distinct if (store.root, key) in _KNOWN
        }
    missing = [key for key in distinct if key not in libraries]
    workers = min(len(missing), _cores())
    if workers > 1:
        with concurrent.futures.ThreadPoolExecutor(workers, "torchstrata-cxx") as pool:
            libraries.update(zip(missing, pool.map(library, missing), strict=True))
    else:
        libraries.update((key, library(key)) for key in missing)
    built, charged = [], set()
    for kernel, key, (_, symbol) in zip(kernels, keys, canonical, strict=True):
        path, seconds = libraries[key]
        handle = _load(store, compiler, key, distinct[key], path)
        first = key not in charged and seconds > 0
        charged.add(key)
        built.append(_entry_point(handle, symbol, kernel, path, seconds if first else 0.0))
    return built


def canonical_of(kernel: KernelSource) -> tuple[str, str]:
    """``kernel``'s canonical source and entry point (see :func:`canonical_source`)."""
    if kernel.canonical is not None:
        return kernel.canonical
    return canonical_text(kernel.source, kernel.name)


@functools.lru_cache(maxsize=512)
def canonical_text(source: str, name: str) -> tuple[str, str]:
    """:func:`canonical_source` of the kernel ``name`` in ``source`` (C++ or Triton),
    memoised: renaming costs milliseconds per kernel (a regular expression over the whole
    prelude), and a graph lowered again for another size generates the same sources. At
    most 512 entries (sources of 1-16 KB and their renamed texts)."""
    return canonical_source(source, name, CANONICAL_ENTRY, GENERATED_PREFIXES)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _library(store: ArtifactStore, compiler: Compiler, key: str, source: str) -> tuple[Path, float]:
    """The verified library of ``source``: from the cache, else compiled and stored.
    Returns its path and the seconds spent compiling (0 for a cache hit)."""
    seconds = 0.0

    def compile_source() -> bytes:
        nonlocal seconds
        start = time.perf_counter()
        data = _compile(compiler, source)
        seconds = time.perf_counter() - start
        return data

    path, _ = store.get_or_build(CACHE_NAMESPACE, key, ".so", compile_source)
    return path, seconds


def _load(
    store: ArtifactStore, compiler: Compiler, key: str, source: str, path: Path
) -> ctypes.CDLL:
    """``dlopen`` the verified library ``path`` once per process. One evicted since it
    was checked is built again; one that passed the check and still does not load is
    discarded (with a warning) and built once more."""
    with _LOADED_LOCK:
        handle = _LOADED.get(key)
        if handle is None:
            if not path.exists():  # evicted by another process (or this one) meanwhile
                path, _ = _library(store, compiler, key, source)
            try:
                handle = ctypes.CDLL(str(path))
            except OSError as error:
                store.discard(CACHE_NAMESPACE, key, ".so", f"dlopen failed: {error}")
                path, _ = _library(store, compiler, key, source)
                try:
                    handle = ctypes.CDLL(str(path))
                except OSError as again:
                    raise CppCompileError(
                        f"{path}, freshly built, does not load: {again}"
                    ) from again
            _LOADED[key] = handle
        _KNOWN[store.root, key] = path
        return handle


def _entry_point(
    handle: ctypes.CDLL, symbol: str, kernel: KernelSource, path: Path, seconds: float
) -> BuiltKernel:
    # A fresh function object per kernel (``handle[symbol]``, not ``getattr``, which
    # caches one): identical kernels share the library but set their own signatures.
    fn = handle[symbol]
    cached = seconds == 0.0
    arguments = [ctypes.c_void_p] * kernel.num_args + [ctypes.c_int64] * kernel.num_sizes
    if not kernel.checks:
        fn.argtypes = arguments
        fn.restype = None
        return BuiltKernel(fn, str(path), seconds, cached)
    # A checking kernel: an error slot, and the number of a failed check back.
    fn.argtypes = [*arguments, ctypes.POINTER(ctypes.c_int64)]
    fn.restype = ctypes.c_int64
    return BuiltKernel(CheckedKernel(fn, kernel.name, kernel.checks), str(path), seconds, cached)


def compile_command(compiler: Compiler, source_path: Path, output: Path, source: str) -> list[str]:
    """The compiler invocation that builds ``source`` (saved at ``source_path``)."""
    command = [*compiler.command, *COMPILER_FLAGS, str(source_path), "-o", str(output)]
    command += link_flags()
    if "omp declare simd" in source:
        command.append("-lmvec")
    return command


def _compile(compiler: Compiler, source: str) -> bytes:
    """The library built from ``source``: with the light prelude, else as written.

    The compiler runs in a private temporary directory on relative paths, so no
    temporary name ends up in the library (the same source gives the same bytes)."""
    with tempfile.TemporaryDirectory(prefix="torchstrata_cpp_") as work:
        source_path, output = Path("kernel.cpp"), Path("kernel.so")
        attempts = [text for text in (lighten(source), source) if text is not None]
        for text in attempts:
            (Path(work) / source_path).write_text(text)
            command = compile_command(compiler, source_path, output, source)
            result = subprocess.run(command, capture_output=True, text=True, check=False, cwd=work)
            if result.returncode == 0:
                return (Path(work) / output).read_bytes()
        raise CppCompileError(f"{' '.join(command)} failed:\n{result.stderr}")
