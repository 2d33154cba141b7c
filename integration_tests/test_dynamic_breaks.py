"""Dynamic shapes across graph breaks (decision 0206): the first graph of a symbolic
entry is symbolic, and the segments its program captures after a break become symbolic
where a size changes at their instruction, so many sizes need no recompile and no
per-size segment. Every call is compared with eager."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch

import torchstrata.runtime as rt
from torchstrata.capture import graph_break
from torchstrata.core import graph_has_symbols

#: Row counts: odd, even, small and large (never 0 or 1).
SIZES = (4, 5, 6, 9, 17, 3, 33, 8, 2, 10, 11, 64)


def branch_and_break(x, w):
    y = torch.relu(x @ w)
    if y.sum() > 0:  # a branch on a tensor's value: a graph break
        y = y * 2
    graph_break()
    return y[: y.shape[0] // 2].sum(0) + y.mean(0)


def item_flag(x, w):
    positive = bool((x @ w).sum() > 0)  # a Python value from a tensor: a graph break
    y = torch.tanh(x @ w)
    return (y if positive else -y).cumsum(0)[-1] * y.shape[0]


def _programs(compiled):
    """The capture programs of the compiled function's entries, in order."""
    return [e.run.func for e in compiled.cache.entries if isinstance(e.run, functools.partial)]


def _call_all(compiled, fn, sizes):
    w = torch.randn(8, 4)
    for size in sizes:
        x = torch.randn(size, 8)
        torch.testing.assert_close(compiled(x, w), fn(x, w), msg=lambda m, s=size: f"{s}: {m}")


@pytest.fixture(autouse=True)
def _no_fallback():
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        yield


@pytest.mark.parametrize("codegen", ["eager", "cpp"])
@pytest.mark.parametrize("fn", [branch_and_break, item_flag], ids=lambda f: f.__name__)
def test_segments_after_breaks_become_symbolic(fn, codegen):
    compiled = rt.compile(fn, codegen=codegen)
    _call_all(compiled, fn, SIZES)
    assert len(compiled.cache) == 2  # static for 4, symbolic for the other eleven sizes
    static, symbolic = _programs(compiled)
    assert not static.dynamic and symbolic.dynamic
    # each resume point: one static segment (the first size there), one symbolic one,
    # per value of the Python values the break made (item_flag's bool: up to two each)
    limit = 2 if fn is branch_and_break else 4
    assert symbolic.segments and all(len(s) <= limit for s in symbolic.segments.values())
    for segments in symbolic.segments.values():
        graphs = [s.graph for s in segments if s.graph is not None]
        assert graphs and graph_has_symbols(graphs[-1])
    report = str(rt.explain(compiled, torch.randn(7, 8), torch.randn(8, 4)))
    assert "graph break" in report.lower()


def test_lowered_once_per_size_and_graph(monkeypatch):
    compiled = rt.compile(branch_and_break, codegen="eager", dynamic=True)
    lowered = []
    original = compiled.pipeline.compile_graph

    def counting(graph, options, aot=None):
        lowered.append(graph)
        return original(graph, options, aot)

    monkeypatch.setattr(compiled.pipeline, "compile_graph", counting)
    sizes = (5, 6, 9, 17, 3, 6, 5, 33)
    _call_all(compiled, branch_and_break, sizes)
    assert len(compiled.cache) == 1
    distinct = len(set(sizes))
    # the first graph once per distinct size; after each of the two breaks, the static
    # segment for 5 and the symbolic one for every other size
    assert len(lowered) == distinct + 2 * (1 + distinct - 1)
    _call_all(compiled, branch_and_break, sizes)
    assert len(lowered) == 3 * distinct  # repeated sizes reuse their lowerings


def test_dynamic_false_keeps_segments_static():
    compiled = rt.compile(branch_and_break, codegen="eager", dynamic=False)
    _call_all(compiled, branch_and_break, (4, 5, 6))
    assert len(compiled.cache) == 3
    assert not any(program.dynamic for program in _programs(compiled))


def break_first(x, w):
    graph_break()  # before any op: the frame does not start with a graph
    return torch.tanh(x @ w).sum(0)


def test_a_frame_refused_symbolic_says_which_break(caplog):
    # the log line of a frame compiled static per shape names the breaks its symbolic
    # capture met (on CUDA it was the only clue: decision 0206's refusal said no more)
    compiled = rt.compile(break_first, codegen="eager", dynamic=True)
    w = torch.randn(8, 4)
    with caplog.at_level("INFO", logger="torchstrata.runtime"):
        for rows in (4, 5):
            x = torch.randn(rows, 8)
            torch.testing.assert_close(compiled(x, w), break_first(x, w))
    refusals = [r.getMessage() for r in caplog.records if "static per shape" in r.getMessage()]
    assert refusals, caplog.text
    assert all("test_dynamic_breaks.py" in text and "graph_break" in text for text in refusals)
