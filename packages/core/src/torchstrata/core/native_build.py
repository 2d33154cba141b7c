"""Small CPython extensions over torch's C++ headers, built once per machine and kept in
the artifact store: what the runtime's native guards and the inductor's native
allocator are built with (decisions 0460, 0510).

An :class:`Extension` is a module name, its C++ source and the torch libraries it links.
:func:`load_extension` compiles it with the C++ compiler the CPU backend uses
(:func:`~torchstrata.core.cxx_compiler.find_cxx`: ``$CXX``, else ``g++``, else ``c++``)
against torch's headers and libraries (rpath to ``torch/lib``), keeps the shared object
in the artifact store (namespace ``native``) under a key over the source, the compiler
and its version, the flags, the libraries and macros, the torch build (version, paths,
C++ ABI), the Python ABI and the machine, and imports it; another process imports it
from the store. A failed build is recorded there too (``.failed``), so that processes
do not each compile again (clearing the cache retries). What the module must do before
it is trusted (a self-test) is the caller's business; :class:`OncePerProcess` keeps what
the caller made of it, or why it could not, for the rest of the process.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import platform
import subprocess
import sysconfig
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Generic, TypeVar

import attrs
import torch

from torchstrata.core.artifacts import CacheSettings, open_store
from torchstrata.core.cxx_compiler import CxxCompilerError, find_cxx

#: The artifact store's namespace for native helpers.
NAMESPACE = "native"
#: The suffix of the entry that records a failed build (its compiler's message).
FAILED_SUFFIX = ".failed"
FLAGS = ("-O2", "-shared", "-fPIC", "-w")
#: Tried in order: torch's headers need C++17 at least; newer ones ask for C++20.
STANDARDS = ("-std=c++17", "-std=c++20")


T = TypeVar("T")


class NativeBuildError(RuntimeError):
    """An extension cannot be built or imported here (the message says why)."""


class OncePerProcess(Generic[T]):
    """What a native helper's loader made, tried once per process: :meth:`get` calls
    ``make`` the first time (under a lock) and keeps its value; where ``make`` raises, the
    value is None for the rest of the process, :attr:`reason` says why and ``logger``
    says so once at INFO (``"<unavailable>: <reason>"``)."""

    def __init__(self, logger: logging.Logger, unavailable: str) -> None:
        self._logger = logger
        self._unavailable = unavailable
        self._lock = threading.Lock()
        self._tried = False
        self._value: T | None = None
        #: why the helper is not used in this process (None: used, or not tried yet)
        self.reason: str | None = None

    def get(self, make: Callable[[], T]) -> T | None:
        """The value ``make`` returned on the first call, or None where it raised."""
        with self._lock:
            if not self._tried:
                self._tried = True
                try:
                    self._value = make()
                except Exception as error:  # noqa: BLE001 - any failure: the fallback
                    self.reason = str(error)
                    self._logger.info("%s: %s", self._unavailable, error)
            return self._value

    def fresh(self) -> OncePerProcess[T]:
        """A new, untried one with the same logger and message (tests start over)."""
        return OncePerProcess(self._logger, self._unavailable)


@attrs.frozen
class Extension:
    """A CPython extension to build: ``name`` is its module's (its ``PyInit_`` function's),
    ``source`` its C++ text, ``version`` a tag bumped when the source changes in a way its
    text would not show, ``libraries`` the torch libraries it links (``c10``,
    ``torch_cpu``, ``torch_python``, ``torch_cuda``: files in ``torch/lib``), ``defines``
    the macros it is compiled with (``NAME`` or ``NAME=VALUE``)."""

    name: str
    source: str
    version: str
    libraries: tuple[str, ...] = ("c10",)
    defines: tuple[str, ...] = ()


def torch_library_exists(name: str) -> bool:
    """Whether torch's ``lib`` folder holds ``lib<name>.so`` (``torch_cuda``: a CUDA
    build of torch)."""
    return (Path(torch_paths()["lib"]) / f"lib{name}.so").exists()


def torch_paths() -> dict[str, str]:
    """torch's header and library folders and Python's headers: ``include``, ``lib``,
    ``python``."""
    root = Path(torch.__file__).parent
    return {
        "include": str(root / "include"),
        "lib": str(root / "lib"),
        "python": sysconfig.get_paths()["include"],
    }


def extension_key(extension: Extension, command: tuple[str, ...], version: str) -> str:
    """The store key of ``extension`` built by ``command`` (whose ``--version`` says
    ``version``) against this torch and Python."""
    paths = torch_paths()
    built_against = (torch.__version__, str(torch._C._GLIBCXX_USE_CXX11_ABI), _python_abi())
    toolchain = (*command, version, *FLAGS, *STANDARDS, *paths.values())
    text = "\n".join(
        (
            extension.name,
            extension.version,
            extension.source,
            *extension.libraries,
            *extension.defines,
            *toolchain,
            *built_against,
            platform.machine(),
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()


def load_extension(extension: Extension, settings: CacheSettings) -> ModuleType:
    """``extension`` from the artifact store under ``settings`` (built into it when
    missing), imported. Raises :class:`NativeBuildError` (no compiler, an earlier or this
    build failed, the import failed)."""
    try:
        found = find_cxx()
    except CxxCompilerError as error:
        raise NativeBuildError(str(error)) from error
    key = extension_key(extension, found.command, found.version)
    store = open_store(settings)
    # an entry of its own (one key is one entry of the store, whatever the suffix)
    failed_key = hashlib.sha256(f"{key}{FAILED_SUFFIX}".encode()).hexdigest()
    failed = store.get(NAMESPACE, failed_key, FAILED_SUFFIX)
    if failed is not None:  # not compiled again by every process (clear the cache to retry)
        reason = failed.read_text(errors="replace")[-500:]
        raise NativeBuildError(f"an earlier build failed: {reason}")
    paths = torch_paths()
    try:
        path, _ = store.get_or_build(
            NAMESPACE, key, ".so", lambda: compile_extension(extension, found.command, paths)
        )
    except NativeBuildError as error:
        store.put(NAMESPACE, failed_key, FAILED_SUFFIX, str(error).encode())
        raise
    return import_extension(extension.name, path)


def compile_extension(
    extension: Extension, command: tuple[str, ...], paths: Mapping[str, str]
) -> bytes:
    """``extension``'s shared object compiled now by ``command`` against ``paths``
    (:func:`torch_paths`); raises :class:`NativeBuildError` with the compiler's message."""
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    errors = []
    with tempfile.TemporaryDirectory(prefix="torchstrata-native-") as directory:
        source = Path(directory) / f"{extension.name}.cpp"
        source.write_text(extension.source)
        target = Path(directory) / f"{extension.name}.so"
        for standard in STANDARDS:
            arguments = [
                *command,
                *FLAGS,
                standard,
                abi,
                *(f"-D{define}" for define in extension.defines),
                "-I",
                paths["include"],
                "-I",
                paths["python"],
                str(source),
                "-o",
                str(target),
                "-L",
                paths["lib"],
                *(f"-l{library}" for library in extension.libraries),
                f"-Wl,-rpath,{paths['lib']}",
            ]
            try:
                result = subprocess.run(
                    arguments, capture_output=True, text=True, check=False, timeout=300
                )
            except (OSError, subprocess.TimeoutExpired) as error:
                raise NativeBuildError(f"compiling failed: {error}") from error
            if result.returncode == 0:
                return target.read_bytes()
            errors.append(f"{standard}: {result.stderr.strip()[-2000:]}")
    raise NativeBuildError("compiling failed: " + "\n".join(errors))


def import_extension(name: str, path: Path) -> ModuleType:
    """The extension module ``name`` imported from the shared object at ``path``."""
    loader = importlib.machinery.ExtensionFileLoader(name, os.fspath(path))
    spec = importlib.util.spec_from_file_location(name, os.fspath(path), loader=loader)
    if spec is None:
        raise NativeBuildError(f"cannot import {path}")
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError as error:  # an unresolved symbol of another torch build, say
        raise NativeBuildError(f"cannot import {path}: {error}") from error
    return module


def _python_abi() -> str:
    return str(sysconfig.get_config_var("EXT_SUFFIX") or platform.python_version())
