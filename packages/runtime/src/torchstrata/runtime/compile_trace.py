"""One compile as it happens: its progress on stderr, the ``graphs``, ``guards``,
``output_code`` and ``perf_hints`` log artifacts, per-stage timings and the debug
directory.

The pipeline opens a :func:`compile_trace` around a compile and reports each stage's
result to :func:`current_trace`; a compile inside another (a frame's graphs, a backward
compiled while ``explain()`` reports) joins the outer trace, so one report and one debug
directory cover it all.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from torchstrata.core import (
    AotResult,
    CaptureResult,
    CompiledGraph,
    CompileOptions,
    Graph,
    Guard,
    PassRecord,
    SymbolicAot,
)
from torchstrata.core.guard_text import describe_guard
from torchstrata.core.logs import artifact_logger, from_env, log_settings
from torchstrata.core.progress_report import Progress, progress
from torchstrata.runtime.debug_dump import DebugDump

logger = logging.getLogger("torchstrata.runtime")
graphs_log = artifact_logger(__name__, "graphs")
guards_log = artifact_logger(__name__, "guards")
output_code_log = artifact_logger(__name__, "output_code")
perf_hints_log = artifact_logger(__name__, "perf_hints")
cache_log = artifact_logger(__name__, "cache")

#: Seconds a compile runs before its progress shows (when progress shows at all).
PROGRESS_DELAY = 2.0

_CURRENT: contextvars.ContextVar[CompileTrace | None] = contextvars.ContextVar(
    "torchstrata_compile_trace", default=None
)


class GuardsText:
    """Guards, one per line with the values they check, formatted only when printed."""

    def __init__(self, guards: Sequence[Guard]) -> None:
        self.guards = guards

    def __str__(self) -> str:
        return "\n".join(f"  {describe_guard(guard)}" for guard in self.guards)


class CompileTrace:
    """What one compile reports as it goes.

    :param title: what is compiled (``f (file.py:3)``, ``backward graph``).
    :param dump: the debug directory's writer, or None.
    :param report: the progress report on stderr.
    """

    def __init__(self, title: str, dump: DebugDump | None, report: Progress | None) -> None:
        self.title = title
        self.dump = dump
        self.report = report
        #: (stage, seconds) for each stage hook called, in order.
        self.stage_seconds: list[tuple[str, float]] = []
        #: every pass run under this trace
        self.pass_records: list[PassRecord] = []
        #: what the compiled-graph cache did (``backward graph: autograd: hit``), in order
        self.graph_cache: list[str] = []
        #: the part of the compile in progress when it is not the whole (``backward
        #: graph``), prefixed to stage names
        self.part = ""

    def _named(self, name: str) -> str:
        return f"{self.part}: {name}" if self.part else name

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the stage ``name`` (and show it as the step in progress)."""
        name = self._named(name)
        if self.report is not None:
            self.report.step(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self.stage_seconds.append((name, seconds))
            logger.debug("%s: %s took %.1f ms", self.title, name, seconds * 1000)

    def cache_event(self, event: str) -> None:
        """Record what the compiled-graph cache did (a hit, a miss, a store)."""
        self.graph_cache.append(self._named(event))

    def after_pass(self, record: PassRecord, graph: Graph) -> None:
        """A pass ran (the pass manager logged it): keep its record, dump its graph."""
        self.pass_records.append(record)
        if self.dump is not None:
            self.dump.graph(self._named(f"{record.stage}-{record.name}"), graph)

    def produced(self, stage: str, result: Any) -> None:
        """Log (and dump) what the stage hook ``stage`` returned."""
        if isinstance(result, CaptureResult):
            self._captured(result)
        elif isinstance(result, AotResult):
            self._graph(f"{stage}-forward", result.forward)
            if result.backward is not None:
                self._graph(f"{stage}-backward", result.backward)
        elif isinstance(result, SymbolicAot):  # one trace for every size (decision 0220)
            self._graph(f"{stage}-symbolic-joint", result.joint)
        elif isinstance(result, Graph):
            self._graph(stage, result)
        elif isinstance(result, CompiledGraph):
            self._compiled(result)

    def _graph(self, name: str, graph: Graph) -> None:
        name = self._named(name)
        graphs_log.debug("%s %s graph of %s:\n%s", name, graph.level.value, self.title, graph)
        if self.dump is not None:
            self.dump.graph(name, graph)

    def _captured(self, capture: CaptureResult) -> None:
        for index, graph in enumerate(capture.graphs):
            self._graph(f"capture-graph{index}", graph)
        guards_log.debug(
            "%d guard(s) of %s:\n%s", len(capture.guards), self.title, GuardsText(capture.guards)
        )
        if capture.graph_breaks:
            perf_hints_log.debug(
                "%s: %d graph break(s) split it into graphs with Python between them "
                "(see the graph_breaks artifact)",
                self.title,
                len(capture.graph_breaks),
            )
        if self.dump is not None:
            self.dump.guards(capture.guards, capture.graph_breaks)

    def _compiled(self, compiled: CompiledGraph) -> None:
        if output_code_log.isEnabledFor(logging.DEBUG):
            for kernel in compiled.kernels:
                if kernel.backend != "extern":
                    where = f" ({kernel.path})" if kernel.path else ""
                    output_code_log.debug(
                        "kernel %s [%s]%s of %s:\n%s",
                        kernel.name,
                        kernel.backend,
                        where,
                        self.title,
                        kernel.source,
                    )
            if compiled.launcher_source:
                output_code_log.debug("launcher of %s:\n%s", self.title, compiled.launcher_source)
        if compiled.eager_ops:
            perf_hints_log.debug(
                "%s: %d op(s) run through ATen, not in generated kernels: %s",
                self.title,
                len(compiled.eager_ops),
                ", ".join(compiled.eager_ops),
            )
        if cache_log.isEnabledFor(logging.DEBUG):
            cache_log.debug(
                "%s: %d kernel(s), %.2f s compiling them (a kernel found in the kernel "
                "cache takes none)",
                self.title,
                len(compiled.kernels),
                compiled.stats.get("compile_seconds", 0.0),
            )
        if self.dump is not None:
            self.dump.compiled(compiled)

    def finish(self) -> None:
        """Write the timings into the debug directory."""
        if self.dump is not None:
            self.dump.timings(self.stage_seconds, self.pass_records)


def function_title(fn: Any) -> str:
    """``qualname (file:line)`` of the function a compile is for."""
    plain = getattr(fn, "__func__", fn)
    name = getattr(plain, "__qualname__", type(plain).__name__)
    code = getattr(plain, "__code__", None)
    return f"{name} ({code.co_filename}:{code.co_firstlineno})" if code else name


def current_trace() -> CompileTrace | None:
    """The compile in progress here (None outside one)."""
    return _CURRENT.get()


@contextlib.contextmanager
def compile_trace(title: str, options: CompileOptions) -> Iterator[CompileTrace]:
    """Trace the compile in the block, or join the one already in progress (as its part
    ``title``, when that is another: a backward compiled while ``explain()`` reports).

    Applies ``TORCHSTRATA_LOGS`` and its siblings on the first compile
    (:func:`torchstrata.core.logs.from_env`).
    """
    outer = _CURRENT.get()
    if outer is not None:
        if title == outer.title:
            yield outer
            return
        previous, outer.part = outer.part, title
        try:
            yield outer
        finally:
            outer.part = previous
        return
    settings = from_env()
    debug_dir = options.debug_dir or settings.debug_dir
    dump = DebugDump(debug_dir, title) if debug_dir else None
    with progress(
        f"compiling {title}", delay=PROGRESS_DELAY, enabled=log_settings().progress
    ) as report:
        trace = CompileTrace(title, dump, report)
        token = _CURRENT.set(trace)
        try:
            yield trace
        finally:
            _CURRENT.reset(token)
            trace.finish()
