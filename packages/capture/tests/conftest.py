"""Shared helpers for capture tests: run a captured program through the reference
interpreter and compare it with eager on fresh inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from torchstrata.capture import capture
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
    graph = result.graphs[0]
    actual = result.program([lambda *inputs: interpret(graph, *inputs)], args, kwargs)
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
