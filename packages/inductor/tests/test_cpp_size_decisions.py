"""What a size decides in a C++ kernel is decided when it is called (decisions 0355-0357):
whether its rows run in parallel (``PARALLEL_THRESHOLD`` elements), whether a column
sum's reduced dim is chunked across threads, and how long a row cache's scratch arrays
are. Kernels over sizes on both sides of each are one source, and each size equals the
reference interpreter."""

from __future__ import annotations

import math

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.backend import CppBackend
from torchstrata.inductor.codegen.cpp.columns import uses_column_loop
from torchstrata.inductor.codegen.cpp.exprs import PARALLEL_THRESHOLD
from torchstrata.inductor.codegen.cpp.row_sizes import size_arguments
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph

WIDTH = 24
#: Rows of a column sum over ``[rows, WIDTH]``: serial, chunked (in parallel) from
#: 32768 / 24 = 1366 rows (one block of columns: it is never parallel unchunked).
COLUMN_ROWS = (2, 5, 17, 33, 64, 100, 333, 1000, 1365, 1366, 1500, 2048, 2731, 3001, 4096, 40)
#: Rows of a softmax over ``[rows, length]``: its parallel threshold is at
#: 32768 / length rows; lengths up to SUM_BLOCK (a float sum blocked past it, another source).
SOFTMAX_SIZES = (
    (3, 5),
    (700, 5),
    (7, 9),
    (4000, 9),
    (2, 17),
    (2000, 17),
    (9, 33),
    (993, 33),
    (2, 64),
    (512, 64),
    (511, 64),
    (6, 100),
    (400, 100),
    (5, 128),
    (256, 128),
    (255, 128),
)
#: Elements of a 1-D pointwise kernel, on both sides of the threshold.
FLAT = (7, 100, 32767, 32768, 40001)


def _kernels(graph) -> list[Kernel]:
    lowered = lower_graph(graph, CppBackend().supports)
    return [step for step in plan_graph(graph, lowered).steps if isinstance(step, Kernel)]


def _column_sum(rows: int):
    """A bias gradient: ``sum(x * 2, 0)`` over ``x [rows, WIDTH]``."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, WIDTH), torch.float32))
    return b.build([b.call(prim("sum"), b.call(prim("mul"), x, 2.0), (0,))])


def _softmax(size: tuple[int, int], ind):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(size, torch.float32))
    return b.build([ind.softmax_last(b, x)])


def _flat(elements: int):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((elements,), torch.float32))
    return b.build([b.call(prim("add"), b.call(prim("mul"), x, 3.0), 1.0)])


def _sources(graphs) -> set[str]:
    backend = CppBackend()
    return {backend.generate(k, frozenset()) for graph in graphs for k in _kernels(graph)}


def test_a_column_sum_is_one_source_serial_parallel_and_chunked():
    graphs = [_column_sum(rows) for rows in COLUMN_ROWS]
    (source,) = _sources(graphs)
    assert "if (red_chunks > 1) {" in source and "#pragma omp parallel" in source
    # one loop over the reduced rows, chunked or not (decision 0390), in a function of its own
    assert source.count("for (int64_t rr = ") == 1 and "ts_rows(" in source
    # the chunking is computed by the kernel from ``red_rows``: no other size argument
    backend = CppBackend()
    for rows, graph in zip(COLUMN_ROWS, graphs, strict=True):
        (kernel,) = _kernels(graph)
        assert uses_column_loop(kernel)
        assert size_arguments(backend._rewritten(kernel)) == (rows,)
    assert f"if (red_rows * {WIDTH} >= {PARALLEL_THRESHOLD}) {{" in source
    assert 1366 * WIDTH >= PARALLEL_THRESHOLD > 1365 * WIDTH


def test_a_column_sum_on_each_side_matches_the_interpreter(ind):
    for rows in (5, 1365, 1366, 3001):
        atol = 1e-5 * math.sqrt(rows)
        ind.check(_column_sum(rows), "cpp", rtol=1e-5, atol=atol)


def _grouped_column_sum(batch: int, groups: int):
    """A sum over dim 0 of ``x [batch, groups, WIDTH]``: ``groups`` groups of columns."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((batch, groups, WIDTH), torch.float32))
    return b.build([b.call(prim("sum"), b.call(prim("mul"), x, 2.0), (0,))])


#: (batch, groups) of a grouped column sum: serial (under 32768 elements), chunked in
#: parallel (300 * 5 * 24 = 36000: 5 items, 4 chunks each), parallel unchunked (40 items).
GROUPED = ((3, 5), (200, 5), (300, 5), (40, 40), (41, 40))


def test_a_grouped_column_sum_is_one_source_on_each_side(ind):
    """One item loop for the chunked and unchunked sizes (decision 0390), equal to the
    reference interpreter at each."""
    graphs = [_grouped_column_sum(batch, groups) for batch, groups in GROUPED]
    (source,) = _sources(graphs)
    assert source.count("for (int64_t rr = ") == 1
    for (batch, _), graph in zip(GROUPED, graphs, strict=True):
        ind.check(graph, "cpp", rtol=1e-5, atol=1e-5 * math.sqrt(batch))


def _gathered_column_sum(rows: int):
    """``gather(x, 0, index).sum(0)``: a column sum whose loads are checked indices."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((50, WIDTH), torch.float32))
    index = b.input("index", TensorMeta((rows, WIDTH), torch.int64))
    return b.build([b.call(prim("sum"), b.call(prim("gather"), x, 0, index), (0,))])


def test_a_checked_column_sum_on_each_side_matches_eager_and_checks(ind):
    """A column sum whose loads check their indices: serial and chunked in one source, its
    item loop compiled once (decision 0390: the function over a range of items reports its
    flags through pointers, the parallel region OR-s the threads' copies), equal to eager
    at each, and an index out of range raises on each side (decision 0394: its scan runs to
    ``red_rows``)."""
    graphs = {rows: _gathered_column_sum(rows) for rows in (5, 1365, 1366, 3001)}
    (source,) = _sources(graphs.values())
    assert "#pragma omp parallel reduction(|:" in source and source.count("for (int64_t rr = ") == 1
    generator = torch.Generator().manual_seed(0)
    for rows, graph in graphs.items():
        compiled = ind.compile(graph, "cpp")
        x = torch.randn(50, WIDTH, generator=generator)
        index = torch.randint(0, 50, (rows, WIDTH), generator=generator)
        (out,) = compiled(x, index)
        want = torch.gather(x, 0, index).sum(0)
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5 * math.sqrt(rows))
        index[rows - 1, 3] = 50
        with pytest.raises(IndexError):
            compiled(x, index)


def test_a_softmax_is_one_source_over_rows_and_row_cache_buckets(ind):
    (source,) = _sources(_softmax(size, ind) for size in SOFTMAX_SIZES)
    assert "if (rows > 1 && rows * red_len >= 32768) {" in source
    # the row loop is compiled once (decision 0359): a function over a range of rows
    assert source.count("for (int64_t xi = row_lo; xi < row_hi; ++xi) {") == 1
    assert source.count("#pragma omp parallel\n") == 1 and "#pragma omp parallel for" not in source


def test_a_softmax_on_each_side_matches_the_interpreter(ind):
    for size in ((511, 64), (512, 64), (6, 100), (257, 128)):
        ind.check(_softmax(size, ind), "cpp", rtol=1e-5, atol=1e-6)


def test_a_flat_pointwise_kernel_is_one_source_on_both_sides(ind):
    (source,) = _sources(_flat(n) for n in FLAT)
    assert "if (rows >= 32768) {" in source and "#pragma omp parallel for simd" in source
    for n in (32767, 32768):
        ind.check(_flat(n), "cpp", rtol=1e-6, atol=1e-6)
