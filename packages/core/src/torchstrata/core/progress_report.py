"""Progress on stderr for long work (a compile, autotuning), in the style the environment
offers: a ``rich`` progress bar or a ``tqdm`` bar when installed, plain lines otherwise.

A report appears only once the work has taken ``delay`` seconds (a timer thread shows
the step in progress then, so a long step shows too), and only where the logs settings
allow it: ``progress=None`` (the default) when stderr is a terminal, ``True`` always,
``False`` never (:func:`torchstrata.core.logs.set_logs`, ``TORCHSTRATA_PROGRESS``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import sys
import threading
import time
from collections.abc import Iterator
from typing import Protocol

from torchstrata.core.logs import log_settings

#: What a compile waits before it shows progress.
COMPILE_DELAY = 2.0
STYLES = ("auto", "rich", "tqdm", "plain")
#: Seconds between two plain progress lines.
PLAIN_INTERVAL = 1.0


class _Display(Protocol):
    def update(self, description: str, done: int) -> None: ...

    def close(self, summary: str) -> None: ...


class _PlainDisplay:
    """A line per step, ``torchstrata: compiling f: codegen (2.1 s)``, at most one a
    second (autotuning steps through configurations faster than anyone reads)."""

    def __init__(self, title: str, total: int | None, started: float) -> None:
        self.title, self.total, self.started = title, total, started
        self.last_line = -math.inf

    def update(self, description: str, done: int) -> None:
        now = time.perf_counter()
        if now - self.last_line < PLAIN_INTERVAL and now != self.last_line:
            return
        self.last_line = now
        count = f" [{done}/{self.total}]" if self.total else ""
        elapsed = now - self.started
        print(
            f"torchstrata: {self.title}{count}: {description} ({elapsed:.1f} s)",
            file=sys.stderr,
            flush=True,
        )

    def close(self, summary: str) -> None:
        print(f"torchstrata: {self.title}: {summary}", file=sys.stderr, flush=True)


class _TqdmDisplay:
    def __init__(self, title: str, total: int | None, started: float) -> None:
        # an optional dependency, imported only when installed
        from tqdm import tqdm  # type: ignore[import-untyped,import-not-found,unused-ignore]

        self.bar = tqdm(total=total, desc=f"torchstrata: {title}", file=sys.stderr, leave=False)
        self.done = 0

    def update(self, description: str, done: int) -> None:
        self.bar.set_postfix_str(description, refresh=False)
        self.bar.update(done - self.done)
        self.done = done

    def close(self, summary: str) -> None:
        self.bar.close()
        print(f"{self.bar.desc}: {summary}", file=sys.stderr, flush=True)


class _RichDisplay:
    def __init__(self, title: str, total: int | None, started: float) -> None:
        # an optional dependency, imported only when installed
        from rich.console import Console  # type: ignore[import-untyped,import-not-found,unused-ignore]
        from rich.progress import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self.title = title
        self.console = Console(file=sys.stderr)
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("torchstrata: {task.description}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self.progress.start()
        self.task = self.progress.add_task(title, total=total)

    def update(self, description: str, done: int) -> None:
        self.progress.update(self.task, description=f"{self.title}: {description}", completed=done)

    def close(self, summary: str) -> None:
        self.progress.stop()
        self.console.print(f"torchstrata: {self.title}: {summary}")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _display_class(style: str) -> type[_PlainDisplay | _TqdmDisplay | _RichDisplay]:
    if style == "rich" or (style == "auto" and _installed("rich")):
        return _RichDisplay
    if style == "tqdm" or (style == "auto" and _installed("tqdm")):
        return _TqdmDisplay
    return _PlainDisplay


def progress_enabled(enabled: bool | None = None) -> bool:
    """Whether progress shows: ``enabled`` if given, else the logs settings' ``progress``,
    else whether stderr is a terminal."""
    if enabled is None:
        enabled = log_settings().progress
    if enabled is None:
        isatty = getattr(sys.stderr, "isatty", None)
        return bool(isatty and isatty())
    return enabled


class Progress:
    """The progress of one piece of work; :meth:`step` as it goes. Shown (from a timer
    thread, or at a step) once ``delay`` seconds have passed."""

    def __init__(self, title: str, total: int | None, delay: float, style: str) -> None:
        if style not in STYLES:
            raise ValueError(f"progress style {style!r} is not one of {STYLES}")
        self.title, self.total, self.delay, self.style = title, total, delay, style
        self.started = time.perf_counter()
        self.description = "starting"
        self.done = 0
        self.display: _Display | None = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._finished = False  # a timer firing after the work ended shows nothing

    def start(self) -> None:
        """Arm the timer that shows the report after ``delay`` seconds."""
        if self.delay <= 0:
            self._show()
            return
        self._timer = threading.Timer(self.delay, self._show)
        self._timer.daemon = True
        self._timer.start()

    def _show(self) -> None:
        with self._lock:
            if self.display is None and not self._finished:
                self.display = _display_class(self.style)(self.title, self.total, self.started)
                self.display.update(self.description, self.done)

    def step(self, description: str, advance: int = 1) -> None:
        """The work moved on to ``description``, ``advance`` units further."""
        with self._lock:
            self.description = description
            self.done += advance
            if self.display is not None:
                self.display.update(description, self.done)

    def finish(self) -> None:
        """Stop the timer; a report that showed ends with the elapsed time."""
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            self._finished = True
            if self.display is not None:
                elapsed = time.perf_counter() - self.started
                self.display.close(f"done in {elapsed:.1f} s")
                self.display = None


class _NoProgress(Progress):
    """Progress that shows nothing (off, or nested in a report already showing)."""

    def start(self) -> None:
        pass

    def step(self, description: str, advance: int = 1) -> None:
        pass

    def finish(self) -> None:
        pass


@contextlib.contextmanager
def progress(
    title: str,
    *,
    total: int | None = None,
    delay: float = COMPILE_DELAY,
    enabled: bool | None = None,
    style: str = "auto",
) -> Iterator[Progress]:
    """Report the progress of the work in the block on stderr (see the module docstring);
    ``style`` forces ``"rich"``, ``"tqdm"`` or ``"plain"``.

    :raises ValueError: an unknown ``style``.
    """
    active: Progress
    if progress_enabled(enabled):
        active = Progress(title, total, delay, style)
    else:
        active = _NoProgress(title, total, delay, "plain")
    active.start()
    try:
        yield active
    finally:
        active.finish()
