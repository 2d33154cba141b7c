"""Graph breaks split a call: graphs before and after, the break run for real, guards
on what each segment assumed, and reasons with source lines."""

from __future__ import annotations

import functools
import inspect

import torch

from torchstrata.capture import (
    CaptureProgram,
    capture,
    frame_locals,
    graph_break,
    guard_failure,
)
from torchstrata.core import interpret

OFFSET = 1.0


def _line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(index for index, line in enumerate(lines) if text in line)


def _run(result, *args):
    runners = [functools.partial(interpret, graph) for graph in result.graphs]
    return result.program(runners, args, {})


def branchy(x):
    y = x * 2
    if y.sum() > 0:
        y = y + 100
    else:
        y = y - 100
    print("after branch")  # replayed after the graph, before the break below
    graph_break()
    return y.relu().sum().item()


def test_value_dependent_branch_follows_eager_on_every_call(capsys):
    result = capture(branchy, (torch.ones(3),), {})
    assert isinstance(result.program, CaptureProgram)
    assert len(result.graphs) == 1
    for sign in (1.0, -1.0, 1.0, -1.0):
        x = torch.full((3,), sign)
        assert _run(result, x) == branchy(x)
    assert capsys.readouterr().out == "after branch\n" * 8


def test_later_breaks_are_reported_with_lines():
    result = capture(branchy, (torch.ones(3),), {})
    expected = [
        _line_of(branchy, "if y.sum() > 0"),
        _line_of(branchy, "graph_break()"),
        _line_of(branchy, ".item()"),
    ]
    assert [graph_break.lineno for graph_break in result.graph_breaks] == expected
    assert "data-dependent control flow" in result.graph_breaks[0].reason
    _run(result, torch.ones(3))
    assert [graph_break.lineno for graph_break in result.program.graph_breaks] == expected


def uses_item_result(x):
    n = x.sum().item()
    y = x * n
    graph_break()
    return y


def test_lookahead_stops_where_a_break_result_is_used():
    result = capture(uses_item_result, (torch.ones(3),), {})
    assert [b.lineno for b in result.graph_breaks] == [_line_of(uses_item_result, ".item()")]
    _run(result, torch.ones(3))
    assert len(result.program.graph_breaks) == 2


def test_segments_after_a_break_go_through_compile_segment():
    compiled = []

    def compile_segment(graph):
        compiled.append(graph)
        return functools.partial(interpret, graph)

    result = capture(branchy, (torch.ones(3),), {}, compile_segment=compile_segment)
    assert not compiled  # compiled on their first run, not when captured
    _run(result, torch.ones(3))
    assert compiled and all(graph.nodes for graph in compiled)


def loop_with_prints(x, steps):
    for i in range(steps):
        x = x + i
        print(i)
        graph_break()
    return x


def test_many_segments_fall_back_to_running_for_real(capsys):
    x = torch.zeros(2)
    result = capture(loop_with_prints, (x, 100), {})
    torch.testing.assert_close(_run(result, x, 100), loop_with_prints(x, 100))
    out = capsys.readouterr().out
    assert out == "".join(f"{i}\n" for i in range(100)) * 2


def make_closure(scale):
    def scaled(x):
        return x * scale

    return scaled


def test_closure_cells_are_guarded():
    fn = make_closure(2.0)
    x = torch.randn(3)
    result = capture(fn, (x,), {})
    frame = frame_locals(fn, (x,), {})
    assert guard_failure(result.guards, frame, fn.__globals__) is None
    fn.__closure__[0].cell_contents = 3.0
    failed = guard_failure(result.guards, frame, fn.__globals__)
    assert failed is not None and "__cell_scale_" in failed.source
    assert dict(failed.cells) == {failed.source.split(".")[0]: fn.__closure__[0]}


def uses_global(x):
    return x + OFFSET


def test_globals_are_guarded():
    global OFFSET
    x = torch.randn(3)
    result = capture(uses_global, (x,), {})
    frame = frame_locals(uses_global, (x,), {})
    assert guard_failure(result.guards, frame, globals()) is None
    OFFSET = 2.0
    try:
        assert guard_failure(result.guards, frame, globals()).source == "G['OFFSET']"
    finally:
        OFFSET = 1.0


def test_inplace_update_of_an_input_runs_in_the_graph():
    def bump(x):
        x.add_(1)
        return x

    x = torch.zeros(3)
    result = capture(bump, (x,), {})
    assert result.graph_breaks == ()
    out = _run(result, x)
    assert out is x and torch.equal(x, torch.ones(3))


def _pair_and_constant(x, y):
    z = x * 2 + y
    return (z, z.sum()), {"scale": 2}, [z]


def _returns_an_input(x):
    return x * 2, x


def test_a_direct_program_returns_what_the_program_does():
    x, y = torch.randn(3), torch.randn(3)
    result = capture(_pair_and_constant, (x, y), {})
    assert result.direct_sources == ("L['x']", "L['y']")
    runners = [functools.partial(interpret, graph) for graph in result.graphs]
    direct = result.direct_program(runners, (x, y))
    expected = result.program(runners, (x, y), {})
    torch.testing.assert_close(direct, expected)
    assert direct[0][0] is direct[2][0]  # one output reached twice is one object
    assert type(direct[2]) is list and direct[1] == {"scale": 2}


def test_no_direct_program_when_the_return_reads_the_frame_or_breaks():
    for fn in (_returns_an_input, branchy):
        result = capture(fn, (torch.ones(3),), {})
        assert result.program is not None
        assert result.direct_sources is None and result.direct_program is None


def test_segment_guards_tell_zeros_apart_and_let_nan_pass():
    """Segments after a graph break check their own guards: ``0.0 == -0.0``, so a segment
    traced for one zero divided to the other's infinity; NaN failed its own guard."""
    from torchstrata.capture.guard_check import compile_guards
    from torchstrata.core import Guard, GuardKind

    def passes(expected, value):
        guard = Guard(GuardKind.CONSTANT_MATCH, "L['s']", expected)
        return compile_guards([guard])({"s": value}, [], {}, {}) == -1

    assert passes(0.0, 0.0) and passes(-0.0, -0.0) and passes(float("nan"), float("nan"))
    assert not passes(0.0, -0.0) and not passes(-0.0, 0.0) and not passes(0.0, 0)
    assert not passes(float("nan"), 1.0) and not passes(1.0, float("nan"))


def split_on_request(x):
    y = x.relu() + 1
    graph_break()
    return y * 2, x.shape[0]


def test_graph_break_call_splits_the_function_there():
    from torchstrata.capture import graph_break as called

    assert called is graph_break and graph_break() is None  # eagerly: nothing
    x = torch.randn(3)
    result = capture(split_on_request, (x,), {})
    (only,) = result.graph_breaks
    assert only.reason == "graph_break() called"
    assert only.lineno == _line_of(split_on_request, "graph_break()")
    assert len(result.graphs) == 1 and result.graphs[0].nodes  # the ops before it
    fresh = torch.randn(5)
    actual, expected = _run(result, fresh), split_on_request(fresh)
    torch.testing.assert_close(actual[0], expected[0])
    assert actual[1] == expected[1]
