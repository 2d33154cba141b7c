"""Which kernels are column reductions: the C++ vote and Triton's unanimous rule."""

from __future__ import annotations

import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.cpp.columns import uses_column_loop
from torchstrata.inductor.codegen.cpp.exprs import supports
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.columns import is_column_reduction
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph


def _column_sum(transposed_terms: int) -> Kernel:
    """``sum(x * x2 + y0 + ..., dim 0)`` over [256, 64]: ``x`` and ``x2`` are read along the
    columns, each ``y`` is a transposed [64, 256] input read along the reduced dim."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((256, 64), torch.float32))
    x2 = b.input("x2", TensorMeta((256, 64), torch.float32))
    body = b.call(prim("mul"), x, x2)
    for i in range(transposed_terms):
        y = b.input(f"y{i}", TensorMeta((64, 256), torch.float32))
        body = b.call(prim("add"), body, b.call(prim("permute"), y, (1, 0)))
    graph = b.build([b.call(prim("sum"), body, (0,))])
    (kernel,) = [
        s for s in plan_graph(graph, lower_graph(graph, supports)).steps if isinstance(s, Kernel)
    ]
    return kernel


def test_contiguous_column_loads_make_a_column_reduction_by_either_rule():
    kernel = _column_sum(0)
    assert is_column_reduction(kernel) and is_column_reduction(kernel, unanimous=True)
    assert uses_column_loop(kernel)


def test_a_minority_of_transposed_loads_passes_the_vote_only():
    kernel = _column_sum(1)
    assert is_column_reduction(kernel) and uses_column_loop(kernel)
    assert not is_column_reduction(kernel, unanimous=True)


def test_a_tie_is_no_column_reduction():
    kernel = _column_sum(2)
    assert not is_column_reduction(kernel) and not uses_column_loop(kernel)
    assert not is_column_reduction(kernel, unanimous=True)
