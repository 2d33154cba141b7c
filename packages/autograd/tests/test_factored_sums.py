"""Per-row factors taken out of sums that repeat an earlier sum (``factored_sums.py``)."""

from __future__ import annotations

import operator
import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchstrata.autograd import aot as aot_graphs
from torchstrata.autograd import trace_graph
from torchstrata.autograd.factored_sums import factor_joint_sums
from torchstrata.core import (
    GraphBuilder,
    Level,
    TensorMeta,
    interpret,
    random_inputs,
    torch_op,
    verify,
)

_SUM = "aten.sum.dim_IntList"


def _call(b, fn, *args, **kwargs):
    return b.call(torch_op(fn), *args, **kwargs)


def _log_sum_exp(b, x):
    """``log(sum(exp(x - max(x)))) + max(x)`` over the last dim, the max not detached."""
    peak = _call(b, torch.amax, x, -1, True)
    total = _call(b, torch.sum, _call(b, torch.exp, _call(b, operator.sub, x, peak)), -1)
    return _call(b, operator.add, _call(b, torch.log, total), _call(b, torch.squeeze, peak, -1))


def _row_sums(graph, shape):
    """The graph's sums over values of ``shape`` (walks over full rows)."""
    return [
        node
        for node in graph.nodes
        if node.op is not None
        and node.op.name == _SUM
        and tuple(node.args[0].tensor_meta.shape) == shape
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_backward_of_a_log_sum_exp_walks_no_row_for_a_sum(aot, dtype):
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta((6, 50), dtype, requires_grad=True))
    graph = b.build([_call(b, torch.mean, _log_sum_exp(b, x))])
    result = aot_graphs(graph)
    assert result.backward is not None
    # the max's gradient used to sum (t / s) * exp(x - max) over each row again
    assert not _row_sums(result.backward, (6, 50))
    x_value = torch.randn(6, 50, dtype=dtype)
    x_value[1, 7] = x_value[1, 9] = x_value[1].max() + 1  # a tie for the max
    aot.check_training(graph, [x_value], rtol=1e-5, atol=1e-6)


def _factored(build, shape=(5, 12), extra=((5, 1), torch.float32)):
    """Inference trace of ``build(b, x, c)`` before and after the rewrite."""
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta(shape, torch.float32))
    c = b.input("c", TensorMeta(*extra))
    graph = b.build(list(build(b, x, c)))
    trace = trace_graph(graph, training=False)
    return trace.graph, factor_joint_sums(trace).graph


def _same_results(before, after):
    inputs = random_inputs(before, seed=3)
    for got, want in zip(interpret(after, *inputs), interpret(before, *inputs), strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("keep_first", [True, False])
@pytest.mark.parametrize("keep_second", [True, False])
@pytest.mark.parametrize("spelling", ["c * e", "e * c", "-(e / c)", "(e * 2.0) * c", "e / 3"])
def test_a_factored_sum_becomes_the_earlier_sum_times_its_factor(keep_first, keep_second, spelling):
    def build(b, x, c):
        e = _call(b, torch.exp, x)
        first = _call(b, torch.sum, e, -1, keep_first)
        factored = {
            "c * e": lambda: _call(b, operator.mul, c, e),
            "e * c": lambda: _call(b, operator.mul, e, c),
            "-(e / c)": lambda: _call(b, operator.neg, _call(b, operator.truediv, e, c)),
            "(e * 2.0) * c": lambda: _call(b, operator.mul, _call(b, operator.mul, e, 2.0), c),
            "e / 3": lambda: _call(b, operator.truediv, e, 3),
        }[spelling]()
        return first, _call(b, torch.sum, factored, [1], keep_second)

    before, after = _factored(build)
    assert len(_row_sums(before, (5, 12))) == 2
    assert len(_row_sums(after, (5, 12))) == 1
    _same_results(before, after)


@pytest.mark.parametrize(
    "factor",
    [((5, 12), torch.float32), ((5, 1), torch.float64)],
    ids=["varies along the sum", "another dtype"],
)
def test_a_factor_that_varies_along_the_sum_or_has_another_dtype_is_left_alone(factor):
    def build(b, x, c):
        e = _call(b, torch.exp, x)
        return _call(b, torch.sum, e, -1), _call(b, torch.sum, _call(b, operator.mul, c, e), -1)

    before, after = _factored(build, extra=factor)
    assert len(_row_sums(after, (5, 12))) == 2
    _same_results(before, after)


def test_a_sum_with_no_earlier_plain_sum_is_left_alone():
    def build(b, x, c):
        e = _call(b, torch.exp, x)
        factored = _call(b, torch.sum, _call(b, operator.mul, c, e), -1)
        # the plain sum comes after, and over the other dim
        return factored, _call(b, torch.sum, e, 0), _call(b, torch.sum, e, -1)

    before, after = _factored(build)
    assert [node.args[1] for node in _row_sums(after, (5, 12))] == [[-1], [0], [-1]]
    _same_results(before, after)


@st.composite
def _factored_torch_graphs(draw):
    """A rank-2 or rank-3 ``x``, its sum over random dims (keepdim or not), and a second
    sum over the same dims of ``x`` under a random chain of negations, products and
    quotients by a factor of size 1 along those dims (broadcast implicitly or expanded)
    or by Python numbers."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=2, max_size=3)))
    rank = len(shape)
    dims = sorted(draw(st.sets(st.integers(0, rank - 1), min_size=1, max_size=rank)))
    held = tuple(1 if d in dims else shape[d] for d in range(rank))
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta(shape, torch.float64))
    c = b.input("c", TensorMeta(held, torch.float64))
    plain = _call(b, torch.sum, x, dims, draw(st.booleans()))
    value = x
    for step in draw(st.lists(st.sampled_from(["neg", "mul", "rmul", "div", "num"]), max_size=4)):
        if step == "neg":
            value = _call(b, operator.neg, value)
        elif step == "num":
            value = _call(b, operator.mul, value, draw(st.sampled_from([0.5, -3.0, 2.0])))
        else:
            factor = _call(b, torch.Tensor.expand, c, shape) if draw(st.booleans()) else c
            fn = operator.truediv if step == "div" else operator.mul
            value = _call(b, fn, factor, value) if step == "rmul" else _call(b, fn, value, factor)
    return b.build([plain, _call(b, torch.sum, value, dims, draw(st.booleans()))])


@settings(
    max_examples=int(os.environ.get("TORCHSTRATA_FUZZ_EXAMPLES", "60")),
    deadline=None,
    derandomize=True,
)
@given(_factored_torch_graphs())
def test_factored_sums_keep_the_value(graph):
    trace = trace_graph(graph, training=False)
    rewritten = factor_joint_sums(trace).graph
    verify(rewritten)
    shape = tuple(graph.inputs[0].tensor_meta.shape)
    chained = (
        len(_row_sums(trace.graph, shape)) == 2
        and trace.graph.outputs[1].args[0] is not (trace.graph.inputs[0])
    )
    if chained:
        assert len(_row_sums(rewritten, shape)) == 1
    x = torch.randn(shape, dtype=torch.float64)
    c = torch.rand(graph.inputs[1].tensor_meta.shape, dtype=torch.float64) + 0.5
    for want, got in zip(interpret(trace.graph, x, c), interpret(rewritten, x, c), strict=True):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
