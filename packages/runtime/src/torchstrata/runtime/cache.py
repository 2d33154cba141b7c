"""In-memory cache of compiled frames: a list of guarded entries per compiled function."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import attrs

from torchstrata.runtime.guards import GuardFailure, GuardSet

#: Runs a cached frame: ``run(args, kwargs)`` returns what the function returns.
FrameRunner = Callable[[tuple[Any, ...], dict[str, Any]], Any]
#: Runs a cached frame from the values its guard check read: ``run_inputs(inputs)``.
InputsRunner = Callable[[tuple[Any, ...]], Any]


@attrs.define
class CacheEntry:
    """Compiled code (or the decision to run eagerly) valid while ``guards`` hold.

    ``run`` is None for an eager entry; ``reason`` then says why. ``checked`` turns
    True once the compiled code has run successfully (the first run may still fall
    back to eager when it raises).
    """

    guards: GuardSet
    run: FrameRunner | None
    reason: str = ""
    checked: bool = False
    #: True when the compiled code runs user Python between graphs (graph breaks): its
    #: side effects may have happened before a failure, so it must not be re-run eagerly.
    has_side_effects: bool = False
    #: ``run`` for a positional call whose ``guards.fetch_args`` gave the inputs (the
    #: capture's direct program); None when there is no such shortcut.
    run_inputs: InputsRunner | None = None


class FrameCache:
    """The entries of one compiled function, tried in insertion order."""

    def __init__(self) -> None:
        self.entries: list[CacheEntry] = []
        self.lock = threading.RLock()
        self.limit_warned = False
        #: the first entry and those made because a guard failed (what
        #: ``recompile_limit`` counts)
        self.recompiles = 0
        #: entries the dynamic-shape policy made (a dimension turned symbolic, a size 0
        #: or 1 specialised: each once per dimension), not counted by the limit
        self.policy_entries = 0
        _ALL_CACHES.add(self)

    def find(self, frame: dict[str, Any], globals_: dict[str, Any]) -> CacheEntry | None:
        """The first entry whose guards hold (the per-call path: no failures collected)."""
        for entry in self.entries:
            if entry.guards.check(frame, globals_) < 0:
                return entry
        return None

    def find_args(
        self,
        args: tuple[Any, ...],
        globals_: dict[str, Any],
        bind: Callable[[tuple[Any, ...]], dict[str, Any]],
    ) -> tuple[CacheEntry | None, tuple[Any, ...] | None]:
        """:meth:`find` for a fast-path positional call (see
        :class:`~torchstrata.runtime.frames.FrameBinder`): guards read ``args`` directly;
        ``bind(args)`` makes the frame only for an entry that cannot.

        Returns the entry and, when its guards are checked by ``fetch_args``, the values
        that check read for ``entry.run_inputs`` (else None)."""
        frame = None
        for entry in self.entries:
            guards = entry.guards
            fetch = guards.fetch_args
            if fetch is not None:  # the same guards as check_args, in the same order
                inputs = fetch(args, globals_)
                if inputs is not None:
                    return entry, inputs
                continue
            check = guards.check_args
            if check is not None:
                if check(args, globals_) < 0:
                    return entry, None
                continue
            if frame is None:
                frame = bind(args)
            if guards.check(frame, globals_) < 0:
                return entry, None
        return None, None

    def lookup(
        self, frame: dict[str, Any], globals_: dict[str, Any]
    ) -> tuple[CacheEntry | None, list[GuardFailure]]:
        """The first entry whose guards hold, and the failures of those tried before it."""
        failures: list[GuardFailure] = []
        for entry in self.entries:
            failure = entry.guards.failure(frame, globals_)
            if failure is None:
                return entry, failures
            failures.append(failure)
        return None, failures

    def add(self, entry: CacheEntry) -> None:
        """Append an entry (checked after the existing ones)."""
        self.entries.append(entry)

    def clear(self) -> None:
        """Drop every entry."""
        with self.lock:
            self.entries.clear()
            self.limit_warned = False
            self.recompiles = self.policy_entries = 0

    def __len__(self) -> int:
        return len(self.entries)


_ALL_CACHES: weakref.WeakSet[FrameCache] = weakref.WeakSet()


def clear_all_caches() -> None:
    """Drop the entries of every live :class:`FrameCache`."""
    for cache in list(_ALL_CACHES):
        cache.clear()
