"""The C++ compiler of this machine, shared by everything that builds native code (the
inductor's C++ kernels, the runtime's native guards): ``$CXX`` split and its program
resolved on ``PATH``, else ``g++``, else ``c++``, with the first line of its
``--version`` (part of every cache key of what it builds)."""

from __future__ import annotations

import functools
import shlex
import shutil
import subprocess

import attrs

from torchstrata.core.env_options import CXX_VARIABLE, Environment


class CxxCompilerError(RuntimeError):
    """No usable C++ compiler: the message names what was looked for."""


@attrs.frozen
class CxxCompiler:
    """The C++ compiler: its command (``$CXX`` split, the program resolved on PATH) and
    the first line of its ``--version``, both part of every cache key."""

    command: tuple[str, ...]
    version: str


def find_cxx(cxx: str | None = None) -> CxxCompiler:
    """The compiler ``cxx`` names (default: ``$CXX``, read now), else ``g++``, else
    ``c++``; raises :class:`CxxCompilerError`."""
    if cxx is None:
        cxx = Environment.from_env().cxx
    return _compiler(cxx)


@functools.cache
def _compiler(cxx: str | None) -> CxxCompiler:
    if cxx:
        words = shlex.split(cxx)
        program = shutil.which(words[0]) if words else None
        if program is None:
            raise CxxCompilerError(f"${CXX_VARIABLE}={cxx!r}: {words[:1]} is not on PATH")
        command = (program, *words[1:])
    else:
        found = next(filter(None, (shutil.which(name) for name in ("g++", "c++"))), None)
        if found is None:
            raise CxxCompilerError(f"no C++ compiler (${CXX_VARIABLE}, g++ or c++) found on PATH")
        command = (found,)
    try:
        result = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, check=False, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise CxxCompilerError(f"{' '.join(command)} --version failed: {error}") from error
    lines = result.stdout.strip().splitlines()
    return CxxCompiler(command, lines[0] if lines else f"unknown (exit {result.returncode})")
