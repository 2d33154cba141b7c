"""``print`` in traced code: no graph break; the text comes out after the graph, as eager
prints it, in program order with the other side effects (decision 0066)."""

from __future__ import annotations

import contextlib
import functools
import io
import sys
import warnings

import pytest
import torch

from torchstrata.capture import capture
from torchstrata.core import interpret


def _run(fn, *args):
    """Capture ``fn`` once, run the program with the graphs interpreted: (result, printed
    text, the capture result)."""
    result = capture(fn, args, {})
    runners = [functools.partial(interpret, graph) for graph in result.graphs]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        value = result.program(runners, args, {})
    return value, out.getvalue(), result


def _eager(fn, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        value = fn(*args)
    return value, out.getvalue()


def prints_between_mutations(x, log, items):
    y = x * 2
    log.append("first")
    print("items", items, y.shape, sep="|", end=";\n")
    items.append(len(log))
    print(y.sum() > -1e9, [1.5, None], {"k": 3})
    log.append("second")
    print()
    return y + 1


def test_print_is_logged_and_printed_after_the_graph_in_program_order():
    x = torch.randn(3)
    log, items = [], [0]
    value, text, result = _run(prints_between_mutations, x, log, items)
    eager_log, eager_items = [], [0]
    expected, expected_text = _eager(prints_between_mutations, x, eager_log, eager_items)
    assert result.graph_breaks == ()
    assert len(result.graphs) == 1
    torch.testing.assert_close(value, expected)
    assert text == expected_text
    assert (log, items) == (eager_log, eager_items)


def prints_a_list_then_changes_it(x, items):
    items.append(1)
    print(items)  # [1]: the list as it was when printed, not as replayed after
    items.append(2)
    return x + len(items)


def test_a_printed_container_shows_its_items_at_the_print():
    items: list = []
    _, text, result = _run(prints_a_list_then_changes_it, torch.ones(2), items)
    assert result.graph_breaks == ()
    assert text == "[1]\n" and items == [1, 2]


def prints_to_stderr(x):
    print("to stderr", file=sys.stderr)
    return x + 1


def prints_with_bad_sep(x):
    print("a", "b", sep=x)
    return x


@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (prints_to_stderr, "print(file=...) to a stream other than sys.stdout"),
        (prints_with_bad_sep, "print(sep=...) with"),
    ],
)
def test_a_print_capture_cannot_replay_breaks_with_a_reason(fn, reason):
    result = capture(fn, (torch.ones(2),), {})
    (only,) = result.graph_breaks
    assert reason in only.reason


def prints_a_tensor_that_requires_grad(w, x):
    y = w * x
    print(y)
    print("in containers", [y, 1], {"y": y.exp()}, (y,))
    return y.sum()


def test_a_tensor_prints_eagers_grad_fn_through_the_runtime():
    runtime = pytest.importorskip("torchstrata.runtime")
    w = torch.randn(3, requires_grad=True)
    x = torch.randn(3)
    compiled = runtime.compile(prints_a_tensor_that_requires_grad, codegen="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to eager
        value, text = _eager(compiled, w, x)
    expected, expected_text = _eager(prints_a_tensor_that_requires_grad, w, x)
    assert "grad_fn=<MulBackward0>" in expected_text and "grad_fn=<ExpBackward0>" in expected_text
    assert text == expected_text
    torch.testing.assert_close(value, expected)
    report = runtime.explain(prints_a_tensor_that_requires_grad, w, x)
    assert report.graph_break_count == 0


def prints_a_hooked_tensor(w, x):
    y = w * x
    y.register_hook(lambda g: g * 2)
    print(y)
    return y.sum()


def test_a_hooked_tensor_prints_the_grad_fn_of_its_op():
    w = torch.randn(3, requires_grad=True)
    x = torch.randn(3)
    _, text, result = _run(prints_a_hooked_tensor, w, x)
    _, expected_text = _eager(prints_a_hooked_tensor, w, x)
    assert result.graph_breaks == ()
    assert "grad_fn=<MulBackward0>" in expected_text
    assert text == expected_text
