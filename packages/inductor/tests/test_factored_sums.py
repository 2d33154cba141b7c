"""Per-row factors taken out of sums that repeat one the graph computes (factored_sums.py)."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchstrata.core import GraphBuilder, Level, Node, TensorMeta, interpret, prim, verify
from torchstrata.core import eliminate_common_subexpressions as cse
from torchstrata.inductor.passes.factored_sums import factor_sums

ROWS, N = 6, 37


def _sums(graph) -> int:
    return sum(node.op == prim("sum") for node in graph.nodes)


def _log_sum_exp_and_its_max_gradient(factor: str):
    """The forward's ``s = sum(e)``, ``e = exp(x - max)``, and the gradient that ``x - max``
    sends to the max: ``-sum(c * e)``, ``c = (1 / s)`` per row, spelled three ways."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((ROWS, N), torch.float32))
    peak = b.call(prim("amax"), x, (1,))
    spread = b.call(prim("broadcast_in_dim"), peak, (ROWS, N), (0,))
    e = b.call(prim("exp"), b.call(prim("sub"), x, spread))
    s = b.call(prim("sum"), e, (1,))
    c = b.call(prim("div"), 0.25, s)
    if factor == "unsqueezed":  # [R] -> [R, 1] -> [R, N], as autograd's expand writes it
        column = b.call(prim("broadcast_in_dim"), c, (ROWS, 1), (0,))
        term = b.call(prim("mul"), b.call(prim("broadcast_in_dim"), column, (ROWS, N), (0, 1)), e)
    elif factor == "reshaped":  # a [R, 1] reshape, its size-1 dim along the sum
        column = b.call(prim("reshape"), b.call(prim("div"), 1.0, c), (ROWS, 1))
        term = b.call(prim("div"), e, b.call(prim("broadcast_in_dim"), column, (ROWS, N), (0, 1)))
    else:  # a Python number, on the right
        term = b.call(prim("mul"), e, 0.5)
    gradient = b.call(prim("sum"), b.call(prim("neg"), term), (1,))
    return b.build([s, gradient])


@pytest.mark.parametrize("factor", ["unsqueezed", "reshaped", "number"])
def test_the_factored_sum_is_the_forward_sum(ind, codegen, factor):
    graph = _log_sum_exp_and_its_max_gradient(factor)
    rewritten = cse(factor_sums(graph))
    verify(rewritten)
    assert (_sums(graph), _sums(rewritten)) == (2, 1)
    ind.check(graph, codegen, rtol=1e-5, atol=1e-6)
    x = torch.randn(ROWS, N)
    x[1, :] = float("-inf")  # NaN statistics, both ways
    x[2, 3] = float("inf")
    ind.check(graph, codegen, inputs=[x], rtol=1e-5, atol=1e-6)


def test_a_sum_not_computed_before_is_left_alone():
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((ROWS, N), torch.float32))
    c = b.input("c", TensorMeta((ROWS,), torch.float32))
    wide = b.call(prim("broadcast_in_dim"), c, (ROWS, N), (0,))
    graph = b.build([b.call(prim("sum"), b.call(prim("mul"), wide, x), (1,))])
    assert factor_sums(graph) is graph  # c * sum(x) could overflow where sum(c * x) does not


def test_a_factor_that_varies_along_the_sum_is_not_taken_out():
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((ROWS, N), torch.float32))
    c = b.input("c", TensorMeta((N,), torch.float32))
    wide = b.call(prim("broadcast_in_dim"), c, (ROWS, N), (1,))
    plain = b.call(prim("sum"), x, (1,))
    scaled: Node = b.call(prim("sum"), b.call(prim("mul"), wide, x), (1,))
    graph = b.build([plain, scaled])
    assert factor_sums(graph) is graph


@st.composite
def _factored_graphs(draw):
    """A rank-2 or rank-3 ``x``, its sum over random dims, and a second sum over the same
    dims of ``x`` under a random chain of negations, products and quotients by factors
    constant along those dims (broadcast from the kept dims, or from a reshape that keeps
    size-1 dims along the summed ones, or Python numbers)."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=2, max_size=3)))
    rank = len(shape)
    dims = tuple(sorted(draw(st.sets(st.integers(0, rank - 1), min_size=1, max_size=rank))))
    kept = [d for d in range(rank) if d not in dims]
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(shape, torch.float64))
    c = b.input("c", TensorMeta(tuple(shape[d] for d in kept), torch.float64))
    plain = b.call(prim("sum"), x, dims)
    value: Node = x
    for step in draw(st.lists(st.sampled_from(["neg", "mul", "rmul", "div", "num"]), max_size=4)):
        if step == "neg":
            value = b.call(prim("neg"), value)
            continue
        if step == "num":
            value = b.call(prim("mul"), value, draw(st.sampled_from([0.5, -3.0, 2.0])))
            continue
        if draw(st.booleans()):  # through a reshape holding size-1 dims along the sum
            held = tuple(1 if d in dims else shape[d] for d in range(rank))
            wide = b.call(prim("reshape"), c, held)
            factor = b.call(prim("broadcast_in_dim"), wide, shape, tuple(range(rank)))
        else:
            factor = b.call(prim("broadcast_in_dim"), c, shape, tuple(kept))
        if step == "rmul":
            value = b.call(prim("mul"), factor, value)
        else:
            value = b.call(prim("mul" if step == "mul" else "div"), value, factor)
    return b.build([plain, b.call(prim("sum"), value, dims)])


@settings(
    max_examples=int(os.environ.get("TORCHSTRATA_FUZZ_EXAMPLES", "60")),
    deadline=None,
    derandomize=True,
)
@given(_factored_graphs())
def test_factored_sums_keep_the_value(graph):
    rewritten = cse(factor_sums(graph))
    verify(rewritten)
    steps = len(graph.nodes) - 2  # a chain of nothing is the plain sum itself
    assert _sums(rewritten) == 1 or steps == 0
    x = torch.randn(graph.inputs[0].tensor_meta.shape, dtype=torch.float64)
    c = torch.rand(graph.inputs[1].tensor_meta.shape, dtype=torch.float64) + 0.5
    for want, got in zip(interpret(graph, x, c), interpret(rewritten, x, c), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
