"""Named tuples that torch ops return (``torch.return_types`` structseqs) keep their class
and field names in captured code, in what the program returns and at graph breaks."""

from __future__ import annotations

import functools

import torch

from torchstrata.capture import capture, graph_break
from torchstrata.core import interpret


def _run(fn, *args):
    result = capture(fn, args, {})
    runners = [functools.partial(interpret, graph) for graph in result.graphs]
    return result, result.program(runners, args, {})


def returns_max(x):
    return x.max(1)


def reads_fields(x):
    result = torch.sort(x, 0)
    return result.values + result.indices, result


def breaks_while_live(x):
    result = x.topk(2)
    graph_break()
    return result.indices, result


def takes_structseq(result):
    return result.values * 2, result


def test_op_results_keep_their_structseq_class():
    x = torch.randn(3, 4)
    captured, actual = _run(returns_max, x)
    assert captured.graph_breaks == ()
    assert type(actual) is torch.return_types.max
    torch.testing.assert_close(actual.values, x.max(1).values)
    torch.testing.assert_close(actual.indices, x.max(1).indices)


def test_fields_read_in_the_graph_and_the_value_returned():
    x = torch.randn(3, 4)
    captured, (total, result) = _run(reads_fields, x)
    assert captured.graph_breaks == ()
    expected = reads_fields(x)
    assert type(result) is torch.return_types.sort
    torch.testing.assert_close(total, expected[0])


def test_structseq_live_at_a_graph_break():
    x = torch.randn(3, 4)
    captured, (indices, result) = _run(breaks_while_live, x)
    assert len(captured.graph_breaks) == 1
    assert type(result) is torch.return_types.topk
    torch.testing.assert_close(indices, x.topk(2).indices)


def test_structseq_argument_is_guarded_by_type_and_rebuilt():
    result = torch.randn(3, 4).min(0)
    captured, (doubled, same) = _run(takes_structseq, result)
    assert captured.graph_breaks == ()
    assert same is result  # an argument comes back as itself
    torch.testing.assert_close(doubled, result.values * 2)
    assert any(
        "type" in guard.kind.value and guard.source == "L['result']" for guard in captured.guards
    )
