"""Progress display: a rich progress bar on stderr, or plain lines when rich is missing."""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any


class Progress:
    """Counts finished steps and shows what runs now. Use as a context manager."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total = total
        self.done = 0
        self.enabled = enabled
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if not self.enabled:
            return self
        try:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import Progress as RichProgress
        except ImportError:
            return self
        self._bar = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )
        self._bar.__enter__()
        self._task = self._bar.add_task("bench", total=self.total)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(kind, exc, tb)

    def now(self, description: str) -> None:
        """Say what is running now."""
        if self._bar is not None:
            self._bar.update(self._task, description=description)
        elif self.enabled:
            print(f"[{self.done}/{self.total}] {description}", file=sys.stderr, flush=True)

    def advance(self) -> None:
        """Mark one step finished."""
        self.done += 1
        if self._bar is not None:
            self._bar.update(self._task, advance=1)

    def log(self, message: str) -> None:
        """Print a line above the bar."""
        if self._bar is not None:
            self._bar.console.print(message, markup=False, highlight=False)
        elif self.enabled:
            print(message, file=sys.stderr, flush=True)
