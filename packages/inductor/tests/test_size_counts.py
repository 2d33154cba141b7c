"""Counts printed from the size arguments (decision 0310): a mean's backward divides its
gradient by the elements, a LayerNorm's backward scales by its row length, a full sum over
``[T, C]`` walks one reduced dim; each is one source over sizes, equal to the reference
interpreter at every size (1, odd sizes, powers of two), and a value that is not the count
stays a literal."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim

WIDTH = 24


def _mean_backward(rows: int, count: float | None = None, per_element: bool = False):
    """``(g / count) * 2x`` over ``[rows, WIDTH]`` (count: the elements by default), the
    gradient of ``mean(x * x)``; ``per_element``: ``2x / count`` instead."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, WIDTH), torch.float32))
    g = b.input("g", TensorMeta((), torch.float32))
    count = float(rows * WIDTH) if count is None else count
    twice = b.call(prim("mul"), x, 2.0)
    if per_element:
        every = b.call(prim("broadcast_in_dim"), g, (rows, WIDTH), ())
        return b.build([b.call(prim("mul"), b.call(prim("div"), twice, count), every)])
    scale = b.call(prim("broadcast_in_dim"), b.call(prim("div"), g, count), (rows, WIDTH), ())
    return b.build([b.call(prim("mul"), scale, twice)])


def _norm_backward(n: int, factor: float | None = None):
    """The shape of a LayerNorm backward over rows of ``n``: ``rstd / n * (n * dy - sum(dy)
    - xhat * sum(dy * xhat))`` (``factor``: another constant in place of ``n * dy``'s)."""
    b = GraphBuilder(Level.PRIMS)
    dy = b.input("dy", TensorMeta((5, n), torch.float32))
    xhat = b.input("xhat", TensorMeta((5, n), torch.float32))
    rstd = b.input("rstd", TensorMeta((5,), torch.float32))
    shape = (5, n)

    def row(value):
        return b.call(prim("broadcast_in_dim"), value, shape, (0,))

    total = row(b.call(prim("sum"), dy, (1,)))
    dot = row(b.call(prim("sum"), b.call(prim("mul"), dy, xhat), (1,)))
    scaled = b.call(prim("mul"), dy, float(n) if factor is None else factor)
    inner = b.call(prim("sub"), b.call(prim("sub"), scaled, total), b.call(prim("mul"), xhat, dot))
    return b.build([b.call(prim("mul"), row(b.call(prim("div"), rstd, float(n))), inner)])


def _full_mean(rows: int):
    """``sum(x) / numel`` over ``[rows, WIDTH]``: a full reduction over two dims."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, WIDTH), torch.float32))
    total = b.call(prim("sum"), b.call(prim("mul"), x, x), (0, 1))
    return b.build([b.call(prim("div"), total, float(rows * WIDTH))])


def _sources(ind, graph, codegen: str) -> tuple[str, ...]:
    compiled = ind.check(graph, codegen, rtol=1e-5, atol=1e-5)
    return tuple(k.source for k in compiled.kernels if k.backend == ind.backend(codegen))


def _one_source(ind, make, sizes, codegen: str) -> str:
    """The one source of ``make``'s graphs over ``sizes`` (sizes whose elements or rows no
    GPU block divides: its `even_rows` masks are a decision in the source, 0201)."""
    sources = {_sources(ind, make(size), codegen) for size in sizes}
    assert len(sources) == 1, f"{len(sources)} sources over {sizes}"
    (source,) = sources.pop()
    return source


def test_a_mean_backward_is_one_source_over_rows(ind, codegen):
    source = _one_source(ind, _mean_backward, (5, 17, 33), codegen)
    count = f"(rows * {WIDTH})" if codegen == "cpp" else "tl.float32) + xnumel)"
    assert count in source
    for rows in (1, 2, 7, 64):
        _sources(ind, _mean_backward(rows), codegen)


def test_a_count_that_is_not_the_elements_stays_a_literal(ind, codegen):
    """``g / 1000`` over 5 x 24 elements (120): a literal, and another source than at 1000
    elements' rows would be."""
    (source,) = _sources(ind, _mean_backward(5, count=1000.0), codegen)
    assert "1000.0" in source and "<float>((rows *" not in source
    assert "+ xnumel)" not in source


def test_a_count_dividing_each_element_stays_a_literal(ind, codegen):
    """``2x / n`` per element: a run-time divisor there would cost static kernels their
    product by a power of two's reciprocal."""
    (source,) = _sources(ind, _mean_backward(8, per_element=True), codegen)
    assert "192.0" in source and "<float>((rows *" not in source and "+ xnumel)" not in source


def test_a_norm_backward_is_one_source_over_row_lengths(ind, codegen):
    source = _one_source(ind, _norm_backward, (33, 41, 57), codegen)
    length = "static_cast<float>(red_len)" if codegen == "cpp" else "tl.float32) + rnumel)"
    # ``n * dy`` per element, ``rstd / n`` per row; C++: in the parallel and the serial loop (0355)
    assert source.count(length) == 2
    for n in (1, 2, 3, 16, 64):
        _sources(ind, _norm_backward(n), codegen)


def test_a_factor_that_is_not_the_row_length_stays_a_literal(ind, codegen):
    (source,) = _sources(ind, _norm_backward(40, factor=41.0), codegen)
    assert "41.0" in source
    length = "static_cast<float>(red_len)" if codegen == "cpp" else "tl.float32) + rnumel)"
    assert source.count(length) == 1  # ``rstd / n`` only


def test_a_coincidence_prints_the_same_number(ind, codegen):
    """``dy * 3`` over rows of 3 elements: the factor read from the length, equal; over
    rows of 4, a literal."""
    at_3, at_4 = (_sources(ind, _norm_backward(n, factor=3.0), codegen) for n in (3, 4))
    assert at_3 != at_4 and "3.0" in at_4[0]


def test_a_count_of_two_stays_a_literal(ind, codegen):
    """``2.0`` and ``0.5`` are too common to read from a count of 2 (``MIN_COUNT``)."""
    (source,) = _sources(ind, _mean_backward(1, count=2.0), codegen)
    assert "2.0" in source and "<float>((rows *" not in source and "+ xnumel)" not in source
    (source,) = _sources(ind, _norm_backward(2), codegen)
    length = "static_cast<float>(red_len)" if codegen == "cpp" else "tl.float32) + rnumel)"
    assert length not in source  # ``rstd`` is a saved value: no reduction's count (0286)


def _half_column_sum(rows: int):
    """``sum(x * 0.5, 0)`` over ``[rows, WIDTH]``: a column sum scaled by GELU's half."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, WIDTH), torch.float32))
    return b.build([b.call(prim("sum"), b.call(prim("mul"), x, 0.5), (0,))])


def test_a_half_is_not_a_variance_factor_over_five_rows(ind):
    """``0.5`` equals ``2 / (n - 1)`` at 5 rows (decision 0340's form): a literal
    (``COMMON``), not a source of its own at that size."""
    sources = {_sources(ind, _half_column_sum(rows), "cpp") for rows in (5, 7, 33)}
    assert len(sources) == 1
    ((source,),) = sources
    assert "static_cast<float>(0.5)" in source and "red_rows - 1" not in source


def test_a_full_mean_over_two_dims_is_one_source_over_rows(ind, codegen):
    source = _one_source(ind, _full_mean, (17, 41, 63), codegen)
    assert ("red_len" if codegen == "cpp" else "rnumel") in source
    for rows in (1, 3, 11):
        _sources(ind, _full_mean(rows), codegen)


def test_counted_simd_loops_stay_vectorised(ind):
    for graph in (_norm_backward(40), _mean_backward(33), _full_mean(40)):
        (source,) = _sources(ind, graph, "cpp")
        assert "red_len" in source or "rows *" in source
        ind.assert_simd_loops_vectorised(source, loading=True)


def _column_mean(rows: int, count: float | None = None):
    """``sum(x, 0) / rows`` over ``[rows, 64]``: a column mean (C++ column loop)."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, 64), torch.float32))
    total = b.call(prim("sum"), x, (0,))
    return b.build([b.call(prim("div"), total, float(rows) if count is None else count)])


def test_a_column_mean_is_one_source_over_rows(ind, codegen):
    source = _one_source(ind, _column_mean, (17, 41, 99), codegen)
    count = "static_cast<float>(red_rows)" if codegen == "cpp" else "tl.float32) + rnumel)"
    assert count in source
    for rows in (1, 2, 3, 64):
        _sources(ind, _column_mean(rows), codegen)


def test_a_column_divisor_that_is_not_the_rows_stays_a_literal(ind):
    (source,) = _sources(ind, _column_mean(40, count=41.0), "cpp")
    assert "41.0" in source and "static_cast<float>(red_rows)" not in source


def _gathered_row_sums(rows: int):
    """``x.gather(1, index).sum(1)`` over ``[rows, 37]`` by ``[rows, 9]`` indices, and the
    gather itself: a checked row kernel and a checked pointwise kernel."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, 37), torch.float32))
    index = b.input("index", TensorMeta((rows, 9), torch.int64))
    gathered = b.call(prim("gather"), x, 1, index)
    return b.build([gathered, b.call(prim("sum"), gathered, (1,))])


def test_gather_scans_run_to_the_size_arguments(ind):
    """The failing path's scans (the first bad index, C++) run to ``rows`` and ``red_len``:
    one source over rows, and each size still names its first bad index."""
    sources = set()
    for rows in (1, 5, 17, 33):
        compiled = ind.compile(_gathered_row_sums(rows), "cpp")
        if rows > 1:
            sources.add(tuple(k.source for k in compiled.kernels))
        x = torch.randn(rows, 37)
        index = torch.randint(0, 37, (rows, 9), generator=torch.Generator().manual_seed(rows))
        want = x.gather(1, index)
        for got, expected in zip(compiled(x, index), (want, want.sum(1)), strict=True):
            torch.testing.assert_close(got, expected)
        index[rows - 1, 8], index[rows // 2, 3] = 40 + rows, 37  # the first in row-major order
        with pytest.raises(IndexError, match=r"^index 37 is out of bounds"):
            compiled(x, index)
    assert len(sources) == 1, f"{len(sources)} sources over 5, 17, 33 rows"
    (kernels,) = sources
    assert all("ts_gather_error" in s and "< 5;" not in s for s in kernels)
