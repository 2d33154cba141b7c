"""Tail fusion (``tails.py``): a full reduction over a row kernel's rows, finished by the
row kernel's last program; checked under Triton's interpreter against the reference."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import (
    CompileOptions,
    GraphBuilder,
    InductorOptions,
    Level,
    TensorMeta,
    eliminate_dead_code,
    prim,
)
from torchstrata.inductor.codegen.triton import backend as triton_backend
from torchstrata.inductor.codegen.triton import tail_code as triton_tail
from torchstrata.inductor.codegen.triton.backend import TritonBackend
from torchstrata.inductor.codegen.triton.printer import supports
from torchstrata.inductor.codegen.triton.tails import fuse_tails
from torchstrata.inductor.codegen.triton.tuning import Config
from torchstrata.inductor.compile import schedule_graph
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph

pytest.importorskip("triton")


def _log_sum_exp_rows(rows: int, n: int):
    """A builder with inputs ``x [rows, n]`` and ``w [rows]``, and ``logsumexp(x, 1)``: row
    max and sum of exp in a row kernel."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, n), torch.float32))
    w = b.input("w", TensorMeta((rows,), torch.float32))
    peak = b.call(prim("amax"), x, (1,))
    wide = b.call(prim("broadcast_in_dim"), peak, (rows, n), (0,))
    total = b.call(prim("sum"), b.call(prim("exp"), b.call(prim("sub"), x, wide)), (1,))
    return b, b.call(prim("add"), b.call(prim("log"), total), peak), w


def _mean_log_sum_exp(rows: int, n: int, kind: str = "sum"):
    """``mean(logsumexp(x, 1) - w)`` (cross-entropy's shape): row max and sum of exp in a
    row kernel, then a reduction (``kind``) over the rows of ``log(sum) + max - w``."""
    b, lse, w = _log_sum_exp_rows(rows, n)
    reduced = b.call(prim(kind), b.call(prim("sub"), lse, w), (0,))
    return b.build([b.call(prim("div"), reduced, float(rows))])


def _first_column_sum_of_softmax(rows: int, n: int):
    """A sum over the rows of a value the row kernel stores along the row: not fusable."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, n), torch.float32))
    peak = b.call(prim("broadcast_in_dim"), b.call(prim("amax"), x, (1,)), (rows, n), (0,))
    e = b.call(prim("exp"), b.call(prim("sub"), x, peak))
    total = b.call(prim("broadcast_in_dim"), b.call(prim("sum"), e, (1,)), (rows, n), (0,))
    soft = b.call(prim("div"), e, total)
    first = b.call(prim("slice"), soft, (0, 0), (rows, 1), (1, 1))
    column = b.call(prim("reshape"), first, (rows,))
    return b.build([soft, b.call(prim("sum"), column, (0,))])


def _kernels(graph) -> list[Kernel]:
    graph = eliminate_dead_code(graph)
    lowered = lower_graph(graph, lambda name, dtype: supports(name, dtype, interpret=True))
    steps = fuse_tails(plan_graph(graph, lowered).steps)
    return [step for step in steps if isinstance(step, Kernel)]


def test_a_mean_over_row_statistics_becomes_the_row_kernels_tail(ind, codegen):
    graph = _mean_log_sum_exp(13, 40)
    compiled = ind.check(graph, codegen, seeds=(0, 1), atol=1e-5, rtol=1e-5)
    if codegen == "cpp":  # C++ calls cost nothing like launches: two kernels there
        assert len(compiled.kernels) == 2
        return
    (kernel,) = compiled.kernels
    assert "ts_done = tl.atomic_add(ts_tail_count, 1, sem='acq_rel')" in kernel.source


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_the_tail_is_deterministic_on_a_gpu(ind):
    # thousands of programs finishing in any order: the same bits every call
    graph = _mean_log_sum_exp(5000, 300)
    compiled = ind.check(graph, "cuda", atol=1e-5, rtol=1e-5)
    x, w = torch.randn(5000, 300), torch.randn(5000)
    results = [compiled(x, w)[0] for _ in range(5)]
    assert all(torch.equal(results[0], result) for result in results)


def test_the_tail_is_deterministic_and_resets_its_ticket(ind, monkeypatch):
    # one row per program and 4 partial sums per step: 4 steps over 13 programs; the
    # second call finds the ticket counter back at zero and adds in the same order
    monkeypatch.setattr(triton_tail, "TAIL_BLOCK", 4)
    monkeypatch.setattr(
        triton_backend, "candidate_configs", lambda kernel, *_, **__: [Config(1, 64, 1, True)]
    )
    graph = _mean_log_sum_exp(13, 40)
    x, w = torch.randn(13, 40), torch.randn(13)
    compiled = ind.compile(graph, "triton")
    (first,) = compiled(x, w)
    (second,) = compiled(x, w)
    assert torch.equal(first, second)
    ordered = sum((torch.logsumexp(x[i], 0) - w[i] for i in range(13)), torch.tensor(0.0))
    torch.testing.assert_close(first, ordered / 13, atol=1e-5, rtol=1e-5)


def test_only_float_sums_over_the_host_rows_of_its_row_values_are_fused(ind):
    assert len(_kernels(_mean_log_sum_exp(13, 40))) == 1
    assert len(_kernels(_mean_log_sum_exp(13, 40, kind="amax"))) == 2
    # the column is a value along the row (a full store): read back, never substituted
    kernels = _kernels(_first_column_sum_of_softmax(6, 10))
    assert len(kernels) == 2 and all(kernel.tail is None for kernel in kernels)
    ind.check(_first_column_sum_of_softmax(6, 10), "triton", atol=1e-5, rtol=1e-5)


def _mean_over_a_count(rows: int, n: int):
    """``sum(logsumexp(x, 1) * keep) / sum(keep)``: the count is its own kernel before the
    row kernel (it reads no row), and the tail divides by it (F.cross_entropy's mean over
    the valid targets)."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, n), torch.float32))
    keep = b.input("keep", TensorMeta((rows,), torch.float32))
    count = b.call(prim("sum"), keep, (0,))
    peak = b.call(prim("amax"), x, (1,))
    wide = b.call(prim("broadcast_in_dim"), peak, (rows, n), (0,))
    total = b.call(prim("sum"), b.call(prim("exp"), b.call(prim("sub"), x, wide)), (1,))
    lse = b.call(prim("add"), b.call(prim("log"), total), peak)
    summed = b.call(prim("sum"), b.call(prim("mul"), lse, keep), (0,))
    return b.build([b.call(prim("div"), summed, count)])


def test_a_mean_over_a_count_computed_before_keeps_its_own_kernel(ind):
    # measured slower as a tail of the row kernel (see tails.py)
    graph = _mean_over_a_count(13, 40)
    kernels = _kernels(graph)
    assert len(kernels) == 3 and all(kernel.tail is None for kernel in kernels)
    keep = (torch.arange(13) % 3 != 0).float()
    ind.check(graph, "triton", inputs=[torch.randn(13, 40), keep], atol=1e-5, rtol=1e-5)


def _log_softmax_and_mean_log_sum_exp(rows: int, n: int):
    """``x - logsumexp(x, 1)`` along the rows and ``mean(logsumexp(x, 1))``: a row kernel
    with a full store, whose mean reads only its row values."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, n), torch.float32))
    peak = b.call(prim("amax"), x, (1,))
    wide = b.call(prim("broadcast_in_dim"), peak, (rows, n), (0,))
    total = b.call(prim("sum"), b.call(prim("exp"), b.call(prim("sub"), x, wide)), (1,))
    lse = b.call(prim("add"), b.call(prim("log"), total), peak)
    shifted = b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), lse, (rows, n), (0,)))
    mean = b.call(prim("div"), b.call(prim("sum"), lse, (0,)), float(rows))
    return b.build([shifted, mean])


def test_a_row_kernel_that_stores_along_its_rows_takes_no_tail(ind):
    # measured slower with a tail than with the mean's own kernel (see tails.py)
    graph = _log_softmax_and_mean_log_sum_exp(13, 40)
    kernels = _kernels(graph)
    assert len(kernels) == 2 and all(kernel.tail is None for kernel in kernels)
    ind.check(graph, "triton", atol=1e-5, rtol=1e-5)


def test_tails_can_be_turned_off():
    graph = _mean_log_sum_exp(13, 40)
    assert len(_kernels(graph)) == 1
    off = TritonBackend(interpret=True, options=InductorOptions(tails=False))
    assert "triton.fuse_tails" not in [p.name for p in off.plan_passes()]
    scheduled = schedule_graph(graph, off, CompileOptions())
    assert len([step for step in scheduled.plan.steps if isinstance(step, Kernel)]) == 2


def _two_sums_over_rows(rows: int, n: int):
    """``sum(lse - w) / sum(lse * w)`` over the rows: a tail of two reductions."""
    b, lse, w = _log_sum_exp_rows(rows, n)
    first = b.call(prim("sum"), b.call(prim("sub"), lse, w), (0,))
    second = b.call(prim("sum"), b.call(prim("mul"), lse, w), (0,))
    return b.build([b.call(prim("div"), first, second)])


def test_a_tails_second_sums_start_at_xnumel(ind, codegen):
    """Each reduction's partial sums start at a multiple of the rows, read from ``xnumel``
    (decision 0310: a literal there made the kernel a source per row count on a GPU)."""
    for rows in (2, 13, 64):
        compiled = ind.check(_two_sums_over_rows(rows, 40), codegen, atol=1e-4, rtol=1e-4)
        if codegen == "cpp":
            continue
        (kernel,) = compiled.kernels
        assert "ts_tail + 1 * xnumel + tl.program_id(0)" in kernel.source
        assert f"ts_tail + {rows} " not in kernel.source
