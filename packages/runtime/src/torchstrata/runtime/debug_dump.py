"""The debug directory: one compile's graphs after every stage and pass, its kernels, its
guards and its timings, as files.

``CompileOptions(debug_dir=D)`` (or ``set_logs(debug_dir=D)``, ``TORCHSTRATA_DEBUG_DIR``)
makes every compile write a fresh directory ``D/<pid>-<n>-<function>/``: files numbered in
the order they were made (``000-capture-graph0.txt``, ``001-post_capture-<pass>.txt``,
``002-autograd-forward.txt``, ..., ``007-codegen-launcher.py``), ``kernels/`` with each
generated kernel's source, ``guards.txt``, ``graph_breaks.txt`` and ``timings.txt``.
Graphs are in core's text form: ``torchstrata.core.parse`` reads them back.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path

from torchstrata.core import CompiledGraph, Graph, GraphBreak, Guard, PassRecord
from torchstrata.core.guard_text import describe_guard

_COUNTER = itertools.count()
_COUNTER_LOCK = threading.Lock()
_KERNEL_SUFFIX = {"cpp": ".cpp", "triton": ".py"}


def _safe(name: str) -> str:
    """``name`` as a file name: letters, digits, ``._-`` (others become ``_``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[:60] or "graph"


class DebugDirError(ValueError):
    """The debug directory cannot be written (the message names it and why)."""


class DebugDump:
    """Writes the files of one compile under ``root`` (a directory made for it)."""

    def __init__(self, debug_dir: str, title: str) -> None:
        with _COUNTER_LOCK:
            number = next(_COUNTER)
        self.root = Path(debug_dir) / f"{os.getpid()}-{number:03d}-{_safe(title)}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise DebugDirError(
                f"debug_dir={debug_dir!r}: cannot make {self.root}: {error}"
            ) from None
        self._files = itertools.count()

    def write(self, name: str, suffix: str, text: str) -> Path:
        """Write ``text`` to the next numbered file ``NNN-<name><suffix>``."""
        path = self.root / f"{next(self._files):03d}-{_safe(name)}{suffix}"
        path.write_text(text if text.endswith("\n") else text + "\n")
        return path

    def graph(self, name: str, graph: Graph) -> None:
        """A graph in core's text form; where it cannot be printed, the reason (a debug
        directory never changes what a compile does: decision 0494)."""
        try:
            text = str(graph)
        except Exception as error:  # noqa: BLE001 - the compile goes on, the file says why
            text = f"# this graph cannot be printed: {type(error).__name__}: {error}"
        self.write(name, ".txt", text)

    def compiled(self, compiled: CompiledGraph) -> None:
        """The launcher (numbered) and every generated kernel (in ``kernels/``)."""
        if compiled.launcher_source:
            self.write("codegen-launcher", ".py", compiled.launcher_source)
        kernels = self.root / "kernels"
        for kernel in compiled.kernels:
            if kernel.backend == "extern" or not kernel.source:
                continue
            kernels.mkdir(exist_ok=True)
            suffix = _KERNEL_SUFFIX.get(kernel.backend, ".txt")
            (kernels / f"{_safe(kernel.name)}{suffix}").write_text(kernel.source)

    def guards(self, guards: Sequence[Guard], graph_breaks: Sequence[GraphBreak]) -> None:
        """``guards.txt`` (each with the value it checks) and ``graph_breaks.txt``."""
        (self.root / "guards.txt").write_text("".join(f"{describe_guard(g)}\n" for g in guards))
        if graph_breaks:
            text = "".join(f"{graph_break}\n" for graph_break in graph_breaks)
            (self.root / "graph_breaks.txt").write_text(text)

    def timings(
        self, stage_seconds: Sequence[tuple[str, float]], records: Sequence[PassRecord]
    ) -> None:
        """``timings.txt``: seconds per stage, then one line per pass."""
        lines = [f"stage {name}: {seconds * 1000:.2f} ms" for name, seconds in stage_seconds]
        lines += [f"pass {record}" for record in records]
        (self.root / "timings.txt").write_text("".join(f"{line}\n" for line in lines))
