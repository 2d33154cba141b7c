"""Tensor mutation in one graph: item assignment and in-place ops through views, forward
and training, against eager (results, mutated inputs, gradients, graph-break counts)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from torchstrata.capture import capture


def last_column(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y[:, -1] = 7.0
    return y


def clamp_negative(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[y < 0] = 0
    return y * x


def cache_write(cache: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    cache[:, 1] = k
    return cache.sum(1)


def indexed_rows(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    rows = torch.tensor([0, 2])
    y[rows] = x[1] * 3
    y[..., None, 0] = x[:, :1] * x[:, 1:2]
    return y


def ints_with_index_tensors(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    cols = torch.tensor([0, 2])
    y[0, cols] = x[1, :2] * 5  # the int selects first, as eager applies it
    y[1:, cols, ...] = 0.5
    return y


def view_of_input(x: torch.Tensor) -> torch.Tensor:
    x[0].add_(1)
    return x * 2


def view_of_intermediate(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y[1:].mul_(x[:-1])
    return y


def masked_rows_from_tensor(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = x * w
    y[x[:, 0] > 0] = w
    return y.sum(0)


PROGRAMS = [
    (last_column, lambda: (torch.randn(3, 4),)),
    (clamp_negative, lambda: (torch.randn(3, 4),)),
    (cache_write, lambda: (torch.zeros(2, 3, 4), torch.randn(2, 4))),
    (indexed_rows, lambda: (torch.randn(3, 4),)),
    (view_of_input, lambda: (torch.randn(3, 4),)),
    (ints_with_index_tensors, lambda: (torch.randn(3, 4),)),
    (view_of_intermediate, lambda: (torch.randn(3, 4),)),
    (masked_rows_from_tensor, lambda: (torch.randn(3, 4), torch.randn(4))),
]


@pytest.mark.parametrize(("fn", "make"), PROGRAMS, ids=[fn.__name__ for fn, _ in PROGRAMS])
def test_one_graph_same_results_and_inputs(fn, make, capture_only):
    result = capture(fn, make(), {})
    assert result.graph_breaks == () and len(result.graphs) == 1
    args = make()
    expected_args = copy.deepcopy(args)
    runner = capture_only(fn)
    torch.testing.assert_close(runner(*args), fn(*expected_args))
    for actual, expected in zip(args, expected_args):
        torch.testing.assert_close(actual, expected)  # inputs written as eager writes them


TRAINABLE = [
    (last_column, lambda: (torch.randn(3, 4),)),
    (ints_with_index_tensors, lambda: (torch.randn(3, 4),)),
    (clamp_negative, lambda: (torch.randn(3, 4),)),
    (indexed_rows, lambda: (torch.randn(3, 4),)),
    (view_of_intermediate, lambda: (torch.randn(3, 4),)),
    (masked_rows_from_tensor, lambda: (torch.randn(3, 4), torch.randn(4))),
]


@pytest.mark.parametrize(("fn", "make"), TRAINABLE, ids=[fn.__name__ for fn, _ in TRAINABLE])
def test_training_gradients_match_eager(fn, make):
    runtime = pytest.importorskip("torchstrata.runtime")
    values = make()
    args = tuple(v.clone().requires_grad_() for v in values)
    expected_args = tuple(v.clone().requires_grad_() for v in values)
    assert runtime.explain(fn, *values).graph_break_count == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to eager
        compiled = runtime.compile(fn, fullgraph=True, codegen="eager")
        out = compiled(*args)
    expected = fn(*expected_args)
    torch.testing.assert_close(out, expected)
    grad = torch.randn_like(expected)
    out.backward(grad)
    expected.backward(grad)
    for actual, reference in zip(args, expected_args):
        torch.testing.assert_close(actual.grad, reference.grad)


def test_boolean_mask_with_one_row_per_element_breaks(capture_only):
    def scatter_selected(x: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[x > 0] = values[: int((x > 0).sum())]
        return y

    x, values = torch.randn(3, 4), torch.randn(12)
    runner = capture_only(scatter_selected)
    torch.testing.assert_close(runner(x, values), scatter_selected(x, values))
    assert runner.breaks  # the count of selected elements is data
