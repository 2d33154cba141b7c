"""Shared helpers for capture tests: run a captured program through the reference
interpreter and compare it with eager on fresh inputs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from torchstrata.capture import capture, frame_locals, guard_failure
from torchstrata.core import CaptureResult, Graph, assert_close_to_eager, interpret, parse, verify


def _flatten(value: Any) -> Any:
    if isinstance(value, dict):
        return [list(value), *(_flatten(item) for item in value.values())]
    if isinstance(value, list | tuple):
        return [_flatten(item) for item in value]
    return value


def check_against_eager(
    result: CaptureResult, fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """Run ``result.program`` with the graph interpreted, on these (fresh) arguments, and
    assert it matches ``fn(*args, **kwargs)`` in structure, types and values."""
    assert result.program is not None, result.graph_breaks
    runners = [functools.partial(interpret, graph) for graph in result.graphs]
    actual = result.program(runners, args, kwargs)
    expected = fn(*args, **kwargs)
    assert type(actual) is type(expected)
    assert_close_to_eager(_flatten(actual), _flatten(expected))
    return actual


def captured_graph(
    fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> tuple[CaptureResult, Graph]:
    """Capture ``fn``; assert it gave one verified graph that round-trips through text."""
    result = capture(fn, args, kwargs)
    assert result.graph_breaks == (), result.graph_breaks
    (graph,) = result.graphs
    verify(graph)
    assert str(parse(str(graph))) == str(graph)
    return result, graph


@pytest.fixture
def captured() -> Callable[..., tuple[CaptureResult, Graph]]:
    """:func:`captured_graph` as a fixture."""
    return captured_graph


@pytest.fixture
def against_eager() -> Callable[..., Any]:
    """:func:`check_against_eager` as a fixture."""
    return check_against_eager


class CaptureOnly:
    """Runs ``fn`` the way the runtime would, with capture alone: capture on the first
    call and whenever the guards of every earlier capture fail, run the program with the
    reference interpreter as the compiled graphs, and eagerly when there is no program.

    ``breaks`` collects every graph break reported (at capture and while running).
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.entries: list[CaptureResult] = []
        self.breaks: list[Any] = []
        self.captures = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        target = self.fn.forward if isinstance(self.fn, torch.nn.Module) else self.fn
        frame = frame_locals(target, args, kwargs)
        globals_ = getattr(getattr(target, "__func__", target), "__globals__", {})
        for entry in self.entries:
            if guard_failure(entry.guards, frame, globals_) is None:
                break
        else:
            entry = capture(self.fn, args, kwargs)
            self.captures += 1
            self.entries.append(entry)
        if entry.program is None:
            self._note(entry.graph_breaks)
            return self.fn(*args, **kwargs)
        runners = [functools.partial(interpret, graph) for graph in entry.graphs]
        result = entry.program(runners, args, kwargs)
        self._note(getattr(entry.program, "graph_breaks", entry.graph_breaks))
        return result

    def _note(self, breaks: Any) -> None:
        for graph_break in breaks:
            if graph_break not in self.breaks:
                self.breaks.append(graph_break)


#: Corpus programs by name: the graph breaks each one had (empty: compiled whole).
CORPUS_RESULTS: dict[str, list[Any]] = {}


@pytest.fixture
def capture_only() -> Callable[[Callable[..., Any]], CaptureOnly]:
    """:class:`CaptureOnly` as a fixture."""
    return CaptureOnly


@pytest.fixture
def corpus_results() -> dict[str, list[Any]]:
    """Where corpus tests record the graph breaks of each program."""
    return CORPUS_RESULTS


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print how many corpus programs compiled with zero graph breaks, and the others
    grouped by the reason of their first break (with its file and line)."""
    if not CORPUS_RESULTS:
        return
    clean = sum(not breaks for breaks in CORPUS_RESULTS.values())
    terminalreporter.write_line(
        f"capture corpus: {clean} of {len(CORPUS_RESULTS)} programs compiled with zero graph breaks"
    )
    groups: dict[str, list[str]] = {}
    for name, breaks in CORPUS_RESULTS.items():
        if breaks:
            first = breaks[0]
            where = f"{name} ({Path(first.filename).name}:{first.lineno})"
            groups.setdefault(first.reason[:160], []).append(where)
    for reason, programs in sorted(groups.items(), key=lambda item: -len(item[1])):
        terminalreporter.write_line(f"  {len(programs):3d}  {reason}")
        terminalreporter.write_line(f"       {', '.join(programs)}")
