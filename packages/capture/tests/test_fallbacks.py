"""Graph breaks: each is reported with a reason and a line; the call is split around it
(or runs eagerly when it cannot be split)."""

from __future__ import annotations

import inspect

import pytest
import torch

from torchstrata.capture import capture, graph_break


def _line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(index for index, line in enumerate(lines) if text in line)


def breaks_on_request(x):
    y = x + 1
    graph_break()
    return y


def uses_item(x):
    scale = x.sum().item()
    return x * scale


def branches_on_tensor(x):
    y = x * 2
    if y.sum() > 0:
        return y
    return -y


def is_generator(x):
    yield x


def uses_with(x):
    with torch.no_grad():
        return x + 1


def sets_attribute(x):
    x.foo = 1
    return x


def calls_helper_that_breaks(x):
    return breaks_on_request(x) * 2


def converts_to_int(x):
    return x * int(x.max())


@pytest.mark.parametrize(
    ("fn", "reason", "line_text"),
    [
        (breaks_on_request, "graph_break() called", "graph_break()"),
        (uses_item, "Tensor.item() makes the result depend on tensor values", ".item()"),
        (branches_on_tensor, "data-dependent control flow", "if y.sum() > 0"),
        (sets_attribute, "assigning attribute 'foo'", "x.foo = 1"),
        (converts_to_int, "int(tensor) makes the result depend on tensor values", "int(x.max())"),
    ],
)
def test_fallback_reason_and_line(fn, reason, line_text):
    result = capture(fn, (torch.randn(3),), {})
    assert result.program is not None
    (only,) = result.graph_breaks
    assert reason in only.reason
    assert only.filename == __file__
    assert only.lineno == _line_of(fn, line_text)
    assert only.instruction


def test_break_in_inlined_function_points_into_it():
    result = capture(calls_helper_that_breaks, (torch.randn(3),), {})
    (only,) = result.graph_breaks
    assert only.lineno == _line_of(breaks_on_request, "graph_break()")


def breaks_inside_with(x):
    with torch.no_grad():
        graph_break()
        print(x)
    return x + 1


def test_break_inside_with_block_is_split(capsys):
    x = torch.randn(3, requires_grad=True)
    result = capture(breaks_inside_with, (x,), {})
    assert result.program is not None and "graph_break" in result.graph_breaks[0].reason
    out = result.program([], (x,), {})
    assert out.requires_grad and capsys.readouterr().out == f"{x}\n"


def test_generator_function_falls_back():
    result = capture(is_generator, (torch.randn(3),), {})
    assert "generators" in result.graph_breaks[0].reason


def test_builtin_callable_and_bad_call_fall_back():
    result = capture(torch.relu, (torch.randn(3),), {})
    assert "has no Python bytecode" in result.graph_breaks[0].reason
    result = capture(breaks_on_request, (torch.randn(3), 1), {})
    assert "does not match the signature" in result.graph_breaks[0].reason


def test_shape_error_in_user_code_falls_back():
    result = capture(lambda x, y: x @ y, (torch.randn(2, 3), torch.randn(4, 5)), {})
    assert "operator.matmul cannot run on meta tensors" in result.graph_breaks[0].reason
