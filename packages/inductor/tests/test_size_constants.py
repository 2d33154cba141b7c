"""A row's reduction scaled by its length prints the length from the kernel's argument
(decision 0286): a mean, a LayerNorm and an RMSNorm are one source over row lengths, and
equal the reference interpreter at every length, odd ones and 1 included."""

from __future__ import annotations

import re

import torch

from torchstrata.core import GraphBuilder, InductorOptions, Level, TensorMeta, prim


def _rows(b: GraphBuilder, length: int, rows: int = 4, dtype: torch.dtype = torch.float32):
    return b.input("x", TensorMeta((rows, length), dtype))


def _mean(length: int, reciprocal: bool = False, dtype: torch.dtype = torch.float32):
    """Row means of ``[4, length]``: ``sum / length``, or ``sum * (1 / length)``."""
    b = GraphBuilder(Level.PRIMS)
    total = b.call(prim("sum"), _rows(b, length, dtype=dtype), (1,))
    if reciprocal:
        return b.build([b.call(prim("mul"), total, 1.0 / length)])
    return b.build([b.call(prim("div"), total, float(length))])


def _rms_norm(length: int):
    """``x * rsqrt(mean(x * x) + eps) * w`` over rows of ``length``."""
    b = GraphBuilder(Level.PRIMS)
    x = _rows(b, length, rows=6)
    w = b.input("w", TensorMeta((length,), torch.float32))
    square = b.call(prim("sum"), b.call(prim("mul"), x, x), (1,))
    rstd = b.call(
        prim("rsqrt"), b.call(prim("add"), b.call(prim("div"), square, float(length)), 1e-6)
    )
    shape = (6, length)
    scaled = b.call(prim("mul"), x, b.call(prim("broadcast_in_dim"), rstd, shape, (0,)))
    return b.build([b.call(prim("mul"), scaled, b.call(prim("broadcast_in_dim"), w, shape, (1,)))])


def _sources(ind, graph, codegen: str) -> tuple[str, ...]:
    compiled = ind.compile(graph, codegen)
    return tuple(k.source for k in compiled.kernels if k.backend == ind.backend(codegen))


#: On a GPU a size argument carries a divisor hint (``rnumel = (rnumel // 8) * 8``,
#: decision 0250): one source per divisibility class of the length, the rest shared.
_DIVISOR_HINT = re.compile(r"^[ ]*(\w+) = \(\1 // \d+\) \* \d+\n", re.M)


def _one_source(ind, make, sizes, codegen: str) -> str:
    sources = set()
    for size in sizes:
        graph = make(size)
        ind.check(graph, codegen, rtol=1e-5, atol=1e-5)
        sources.add(_sources(ind, graph, codegen))
    if codegen == "cuda":
        sources = {tuple(_DIVISOR_HINT.sub("", text) for text in group) for group in sources}
    assert len(sources) == 1, f"{len(sources)} sources over {sizes}"
    (source,) = sources.pop()
    return source


def _printed_length(codegen: str) -> str:
    return "static_cast<float>(red_len)" if codegen == "cpp" else "tl.float32) + rnumel)"


def test_a_layer_norm_is_one_source_over_row_lengths(ind, codegen):
    source = _one_source(ind, lambda n: ind.layer_norm_rows(5, n), (33, 40, 57), codegen)
    # the mean and the variance, in the one row loop (C++: a function of its own, 0359)
    assert source.count(_printed_length(codegen)) == 2
    for length in (1, 2, 3, 17, 100):
        ind.check(ind.layer_norm_rows(5, length), codegen, rtol=1e-5, atol=1e-5)


def test_an_rms_norm_is_one_source_over_row_lengths(ind, codegen):
    source = _one_source(ind, _rms_norm, (35, 45, 63), codegen)
    assert _printed_length(codegen) in source
    for length in (1, 2, 7, 64):
        ind.check(_rms_norm(length), codegen, rtol=1e-5, atol=1e-5)


def test_a_mean_is_one_source_by_length_or_by_reciprocal(ind, codegen):
    source = _one_source(ind, _mean, (3, 10, 77), codegen)
    assert _printed_length(codegen) in source
    reciprocal = lambda n: _mean(n, reciprocal=True)  # noqa: E731
    source = _one_source(ind, reciprocal, (3, 10, 77), codegen)
    assert ("1.0 / static_cast<double>(red_len)" if codegen == "cpp" else "/ rnumel)") in source
    for length in (1, 2, 5):
        ind.check(_mean(length), codegen)
        ind.check(_mean(length, reciprocal=True), codegen)


def test_a_float64_mean_is_one_source(ind):
    source = _one_source(ind, lambda n: _mean(n, dtype=torch.float64), (3, 10, 77), "cpp")
    assert "static_cast<double>(red_len)" in source
    reciprocal = lambda n: _mean(n, True, torch.float64)  # noqa: E731
    source = _one_source(ind, reciprocal, (3, 10, 77), "cpp")
    assert "static_cast<double>(1.0 / static_cast<double>(red_len))" in source


def test_a_constant_equal_to_the_length_at_one_size_only_keeps_the_other_sizes_right(ind, codegen):
    """``sum / 17`` over rows of 17 and of 33: the same number at 17, a literal at 33."""

    def fixed(length: int):
        b = GraphBuilder(Level.PRIMS)
        return b.build([b.call(prim("div"), b.call(prim("sum"), _rows(b, length), (1,)), 17.0)])

    at_17, at_33 = (_sources(ind, fixed(n), codegen) for n in (17, 33))
    assert at_17 != at_33 and "17.0" in at_33[0]
    for length in (17, 33):
        ind.check(fixed(length), codegen, rtol=1e-5, atol=1e-5)


def test_a_length_dividing_each_element_stays_a_literal(ind):
    """``x / n`` per element: a division by a run-time length would stay a division (by a
    literal power of two it is a product), so the literal is kept (decision 0310). With
    ``reciprocals`` (the default) it is ``x * (1 / n)``, the reciprocal once per row, and
    that ``n`` is the row's length."""
    b = GraphBuilder(Level.PRIMS)
    x = _rows(b, 9)
    total = b.call(prim("sum"), x, (1,))
    scaled = b.call(prim("div"), x, 9.0)
    graph = b.build([total, scaled])
    exact = InductorOptions(reciprocals=False)
    ind.check(graph, "cpp", inductor=exact)
    (source,) = (k.source for k in ind.compile(graph, "cpp", exact).kernels)
    assert "static_cast<float>(9.0)" in source and "static_cast<float>(red_len)" not in source
    ind.check(graph, "cpp")
    (source,) = _sources(ind, graph, "cpp")
    assert "static_cast<float>(1.0) / static_cast<float>(red_len)" in source


def test_sized_norm_simd_loops_stay_vectorised(ind):
    for graph in (ind.layer_norm_rows(5, 33), _rms_norm(45)):
        (source,) = _sources(ind, graph, "cpp")
        assert "red_len)" in source
        ind.assert_simd_loops_vectorised(source, loading=True)


def _variance(length: int, less: float = 1.0, reciprocal: bool = False):
    """``torch.var(x, 1)`` (``correction=1``) and its ``sqrt`` over ``[4, length]`` as the
    decomposition writes them: ``sum((x - mean)**2) / (n - 1)``; ``less``: another
    correction; ``reciprocal``: ``* (1 / (n - 1))``."""
    b = GraphBuilder(Level.PRIMS)
    x = _rows(b, length)
    mean = b.call(prim("div"), b.call(prim("sum"), x, (1,)), float(length))
    d = b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), mean, (4, length), (0,)))
    squares = b.call(prim("sum"), b.call(prim("mul"), d, d), (1,))
    if reciprocal:
        var = b.call(prim("mul"), squares, 1.0 / (length - less))
    else:
        var = b.call(prim("div"), squares, float(length - less))
    return b.build([var, b.call(prim("sqrt"), var)])


def _printed_length_less_one(codegen: str) -> str:
    return "static_cast<float>((red_len - 1))" if codegen == "cpp" else "+ (rnumel - 1))"


def test_an_unbiased_variance_is_one_source_over_row_lengths(ind, codegen):
    """``n - 1`` (decision 0340) read from the length; right at 2 (a literal ``1.0``), 3
    and powers of two."""
    source = _one_source(ind, _variance, (33, 40, 57), codegen)
    assert _printed_length_less_one(codegen) in source
    for length in (2, 3, 16):
        ind.check(_variance(length), codegen, rtol=1e-5, atol=1e-5)
    assert _printed_length_less_one(codegen) not in _sources(ind, _variance(2), codegen)[0]
    source = _one_source(ind, lambda n: _variance(n, reciprocal=True), (33, 57), codegen)
    assert (
        "1.0 / static_cast<double>((red_len - 1))" if codegen == "cpp" else "/ (rnumel - 1)"
    ) in source


def test_another_correction_stays_a_literal(ind, codegen):
    """``correction=2``: ``n - 2`` is no count the kernel prints; its literal stays."""
    (source,) = _sources(ind, _variance(40, less=2.0), codegen)
    assert "38.0" in source and _printed_length_less_one(codegen) not in source


def _variance_backward(length: int, factor: float | None = None, divide: bool = False):
    """The gradient of ``torch.var(x, 1)`` over ``[4, length]`` as autograd writes it:
    ``g * (2 / (n - 1)) * (x - mean)`` (``factor``: another constant; ``divide``: ``g / (n
    - 1)`` instead, a per-row value divided by the count)."""
    b = GraphBuilder(Level.PRIMS)
    x = _rows(b, length)
    g = b.input("g", TensorMeta((4,), torch.float32))
    total = b.call(prim("broadcast_in_dim"), b.call(prim("sum"), x, (1,)), (4, 1), (0,))
    mean = b.call(prim("div"), total, float(length))
    d = b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), mean, (4, length), (0, 1)))
    wide = b.call(prim("broadcast_in_dim"), g, (4, 1), (0,))
    if divide:
        scale = b.call(prim("div"), wide, float(length - 1))
    else:
        scale = b.call(prim("mul"), wide, 2.0 / (length - 1) if factor is None else factor)
    return b.build(
        [b.call(prim("mul"), b.call(prim("broadcast_in_dim"), scale, (4, length), (0, 1)), d)]
    )


def test_an_unbiased_variance_backward_is_one_source_over_row_lengths(ind, codegen):
    """``2 / (n - 1)`` (decision 0340) computed in double from the length; right at 2, 3, 4
    (``2 / (n - 1)`` a literal while ``n - 1`` is under ``MIN_COUNT``) and 16."""
    source = _one_source(ind, _variance_backward, (33, 40, 57), codegen)
    assert (
        "2.0 / static_cast<double>((red_len - 1))" if codegen == "cpp" else "/ (rnumel - 1)"
    ) in source
    for length in (2, 3, 4, 16):
        ind.check(_variance_backward(length), codegen, rtol=1e-5, atol=1e-5)
    (source,) = _sources(ind, _variance_backward(40, factor=2.0 / 38), codegen)
    assert "- 1)" not in source  # ``2 / (n - 2)``: a literal
    source = _one_source(ind, lambda n: _variance_backward(n, divide=True), (33, 57), codegen)
    assert "- 1)" in source


def test_a_variance_backward_simd_loop_stays_vectorised(ind):
    """``2 / (n - 1)`` is computed once per row, before the row's SIMD loop."""
    (source,) = _sources(ind, _variance_backward(40), "cpp")
    assert "(red_len - 1)" in source
    ind.assert_simd_loops_vectorised(source, loading=True)


def _scaled_rows(length: int, factor: float):
    """``x * factor - sum(x, 1)`` over ``[4, length]``: a per-element factor."""
    b = GraphBuilder(Level.PRIMS)
    x = _rows(b, length)
    total = b.call(prim("broadcast_in_dim"), b.call(prim("sum"), x, (1,)), (4, length), (0,))
    return b.build([b.call(prim("sub"), b.call(prim("mul"), x, factor), total)])


def test_a_per_element_factor_equal_to_the_variance_factor_stays_a_literal(ind, codegen):
    """``0.4`` is ``2 / (n - 1)`` at ``n = 6``; scaling each element, it is no variance's
    backward factor (that scales a row's gradient): a literal at every length, one source
    over 5, 6 and 7 in every backend (decisions 0360, 0392; the C++ source printed it from
    ``red_len`` at 6, a source of its own), equal to the reference at each."""
    source = _one_source(ind, lambda n: _scaled_rows(n, 0.4), (5, 6, 7), codegen)
    assert "0.4" in source and "- 1)" not in source
