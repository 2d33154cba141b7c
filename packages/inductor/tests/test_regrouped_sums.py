"""Column sums over the same elements with their reduced dims split another way join one
kernel: a bias gradient summed over a ``[B*T, C]`` view and a norm's weight gradient
summed over the first two dims of the ``[B, T, C]`` value."""

from __future__ import annotations

import torch

from torchstrata.core import Graph, GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.cpp.columns import uses_column_loop
from torchstrata.inductor.codegen.cpp.exprs import supports
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph


def _sums(rows: tuple[int, int], columns: int, view_rows: int | None = None) -> Graph:
    """``sum(dy * x, (0, 1))``, ``sum(dy, (0, 1))`` over ``[B, T, C]`` and the sum of
    ``g = dy + x`` (an output, as a residual gradient is) viewed as ``[view_rows, -1]``
    over dim 0."""
    b = GraphBuilder(Level.PRIMS)
    shape = (*rows, columns)
    x = b.input("x", TensorMeta(shape, torch.float32))
    dy = b.input("dy", TensorMeta(shape, torch.float32))
    dw = b.call(prim("sum"), b.call(prim("mul"), dy, x), (0, 1))
    db = b.call(prim("sum"), dy, (0, 1))
    g = b.call(prim("add"), dy, x)
    flat_rows = view_rows if view_rows is not None else rows[0] * rows[1]
    flat = b.call(prim("reshape"), g, (flat_rows, rows[0] * rows[1] * columns // flat_rows))
    bias = b.call(prim("sum"), flat, (0,))
    return b.build([g, dw, db, bias])


def _kernels(graph: Graph) -> list[Kernel]:
    plan = plan_graph(graph, lower_graph(graph, supports))
    return [step for step in plan.steps if isinstance(step, Kernel)]


def test_a_sum_over_a_flattened_view_joins_the_sums_over_the_same_rows():
    kernels = _kernels(_sums((2, 8), 16))
    # one column kernel for dw, db and the bias (g's pointwise kernel apart)
    assert sorted(len(k.reductions) for k in kernels) == [0, 3]
    (columns,) = [k for k in kernels if k.reductions]
    assert columns.row_shape == (16,) and columns.red_shape == (2, 8)


def test_sums_over_other_elements_stay_apart():
    # [2, 8, 16] viewed as [8, 32]: 32 columns of 8 elements, not 16 columns of 16
    kernels = _kernels(_sums((2, 8), 16, view_rows=8))
    assert sorted(len(k.reductions) for k in kernels) == [0, 1, 2]


def test_regrouped_sums_compute_what_the_reference_does(ind, codegen):
    compiled = ind.check(_sums((3, 40), 24), codegen, seeds=(0, 1))
    assert len(compiled.kernels) == 2


def _bias_gradient(transposed: bool = False) -> Graph:
    """``g = dy * (x + 1)`` over ``[M, N]`` (an output, as a gradient a matmul reads is) and
    its column sum over ``M``; ``transposed``: ``x`` is read through a permute of an
    ``[N, M]`` input, across the columns."""
    b = GraphBuilder(Level.PRIMS)
    dy = b.input("dy", TensorMeta((48, 40), torch.float32))
    if transposed:
        x = b.call(prim("permute"), b.input("x", TensorMeta((40, 48), torch.float32)), (1, 0))
        dy = b.call(prim("permute"), b.input("dyt", TensorMeta((40, 48), torch.float32)), (1, 0))
    else:
        x = b.input("x", TensorMeta((48, 40), torch.float32))
    g = b.call(prim("mul"), dy, b.call(prim("add"), x, 1.0))
    return b.build([g, b.call(prim("sum"), g, (0,))])


def test_a_column_sum_joins_the_kernel_that_computes_its_operand():
    (kernel,) = _kernels(_bias_gradient())
    assert kernel.row_shape == (40,) and kernel.red_shape == (48,)
    assert len(kernel.full_stores) == 1 and len(kernel.reductions) == 1
    assert uses_column_loop(kernel)


def test_a_column_sum_of_values_read_across_the_columns_stays_apart():
    kernels = _kernels(_bias_gradient(transposed=True))
    assert sorted(len(k.reductions) for k in kernels) == [0, 1]


def test_a_column_sum_with_its_operand_computes_what_the_reference_does(ind, codegen):
    for transposed in (False, True):
        ind.check(_bias_gradient(transposed), codegen, seeds=(0, 1))


def test_blocking_the_column_joins_keeps_each_sum_in_a_kernel_of_its_own():
    graph = _bias_gradient()
    plan = plan_graph(graph, lower_graph(graph, supports), join_columns=False)
    kernels = [step for step in plan.steps if isinstance(step, Kernel)]
    assert sorted(len(k.reductions) for k in kernels) == [0, 1]
