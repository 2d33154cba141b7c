"""More kernel kinds take the sizes a symbolic dim changes as arguments (decision 0285):
a cat's bounds (a KV-cache append), a column sum over a row dim, C++ long rows (online
chunk loops, lane sums). Each graph is lowered at several sizes: one source, and the
results equal the reference interpreter at every size, odd ones and size 1 included."""

from __future__ import annotations

import math

import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.cat_bounds import cat_sizes


def _append(length: int):
    """A decode step's cache append: ``cat([cache, new], 1)`` of ``[2, length, 32]`` and
    ``[2, 1, 32]``, for keys and values (one kernel, two outputs)."""
    b = GraphBuilder(Level.PRIMS)
    k_cache = b.input("k_cache", TensorMeta((2, length, 32), torch.float32))
    v_cache = b.input("v_cache", TensorMeta((2, length, 32), torch.float32))
    k = b.input("k", TensorMeta((2, 1, 32), torch.float32))
    v = b.input("v", TensorMeta((2, 1, 32), torch.float32))
    keys = b.call(prim("cat"), [k_cache, k], 1)
    values = b.call(prim("cat"), [v_cache, b.call(prim("mul"), v, 2.0)], 1)
    return b.build([keys, values])


def _prepend(length: int):
    """A token before the cache: ``cat([new, cache], 1)``, a first bound of 1 (no argument)."""
    b = GraphBuilder(Level.PRIMS)
    new = b.input("new", TensorMeta((3, 1, 40), torch.float32))
    cache = b.input("cache", TensorMeta((3, length, 40), torch.float32))
    return b.build([b.call(prim("cat"), [new, cache], 1)])


def _middle(length: int):
    """A cat whose middle piece has the symbolic length: ``[4, 3 + length + 2, 40]`` (a
    width no bound here reaches: a bound equal to it has a source of its own)."""
    b = GraphBuilder(Level.PRIMS)
    head = b.input("head", TensorMeta((4, 3, 40), torch.float32))
    body = b.input("body", TensorMeta((4, length, 40), torch.float32))
    tail = b.input("tail", TensorMeta((4, 2, 40), torch.float32))
    return b.build([b.call(prim("cat"), [head, b.call(prim("exp"), body), tail], 1)])


def _halves(width: int):
    """A cat along the innermost dim (rotate-half): its static bounds stay literals."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((6, width), torch.float32))
    y = b.input("y", TensorMeta((6, width), torch.float32))
    return b.build([b.call(prim("cat"), [x, b.call(prim("neg"), y)], 1)])


def _sum_over_batch(length: int):
    """``sum(x * 2, 0)`` over ``[3, length, 24]``: the reduced dim's stride is ``24*length``."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((3, length, 24), torch.float32))
    return b.build([b.call(prim("sum"), b.call(prim("mul"), x, 2.0), (0,))])


def _row_sum(length: int):
    """Row sums of ``[4, length]`` float32: C++ lane sums past 128 elements."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, length), torch.float32))
    return b.build([b.call(prim("sum"), b.call(prim("mul"), x, 2.0), (1,))])


def _long_softmax(length: int, ind):
    """Softmax over rows longer than a row cache holds: C++ online chunk loops."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((2, length), torch.float32))
    return b.build([ind.softmax_last(b, x)])


def _sources(ind, graph, codegen: str) -> tuple[str, ...]:
    compiled = ind.compile(graph, codegen)
    return tuple(k.source for k in compiled.kernels if k.backend == ind.backend(codegen))


def _one_source(ind, make, sizes, codegen: str, **tolerances: float) -> str:
    """The one source of ``make(size)``'s kernels over ``sizes``, each checked first."""
    sources = set()
    for size in sizes:
        graph = make(size)
        ind.check(graph, codegen, **tolerances)
        sources.add(_sources(ind, graph, codegen))
    assert len(sources) == 1, f"{len(sources)} sources over {sizes}"
    (source,) = sources.pop()
    return source


def test_a_cache_append_is_one_source(ind, codegen):
    source = _one_source(ind, _append, (5, 17, 33), codegen)
    assert "cat0" in source and "cat1" in source
    if codegen == "cpp":  # rows split by a size argument: nested loops, no division per row
        assert "x1 < cat1" in source and "xi /" not in source
    # size 1 (a bound of 1 is no argument), small edges, parallel rows (collapsed loops)
    for length in (1, 2, 3, 64, 700):
        ind.check(_append(length), codegen)
    if codegen == "cpp":
        (parallel,) = _sources(ind, _append(700), codegen)
        assert "#pragma omp parallel for collapse(2)" in parallel


def test_a_cat_after_a_piece_of_one_is_one_source(ind, codegen):
    # 120*(length + 1) elements: 8 divides each, 16 none (a GPU source spells that divisor)
    source = _one_source(ind, _prepend, (6, 16, 32), codegen)
    assert "(cat0 - 1)" in source  # the cache's length
    for length in (1, 2, 5):
        ind.check(_prepend(length), codegen)


def test_a_cat_with_a_symbolic_middle_piece_is_one_source(ind, codegen):
    source = _one_source(ind, _middle, (9, 17, 33), codegen, rtol=1e-5, atol=1e-5)
    assert "(cat1 - cat0)" in source  # the middle piece's length
    for length in (1, 2, 40):
        ind.check(_middle(length), codegen, rtol=1e-5, atol=1e-5)


def test_the_bounds_arguments_are_the_compared_constants_and_the_extent(ind):
    kernel = ind.only_kernel(_middle(7))
    assert cat_sizes(kernel) == (3, 10, 12)
    assert cat_sizes(ind.only_kernel(_halves(8))) == ()  # the innermost dim: literals


def test_a_cat_along_the_innermost_dim_keeps_its_literal_bounds(ind, codegen):
    graph = _halves(8)
    ind.check(graph, codegen)
    (source,) = _sources(ind, graph, codegen)
    assert "cat0" not in source


def test_a_column_sum_over_a_row_dim_is_one_source(ind, codegen):
    sizes = (5, 17, 33)
    source = _one_source(ind, _sum_over_batch, sizes, codegen, rtol=1e-5, atol=1e-5)
    assert ("groups" if codegen == "cpp" else "xnumel*r0") in source
    for length in (1, 2, 700):
        ind.check(_sum_over_batch(length), codegen, rtol=1e-5, atol=1e-5)


def test_long_row_sums_are_one_source(ind, codegen):
    # lane sums of 256 elements and a rest of any length; odd (a GPU source spells a
    # power-of-two divisor of the row length)
    sizes = (301, 517, 1001)
    # a sum of ``length`` unit normals in another order than ATen's: error ~ sqrt(length)
    source = _one_source(ind, _row_sum, sizes, codegen, rtol=1e-5, atol=1e-5 * math.sqrt(1000))
    if codegen == "cpp":
        assert "(red_len / 256) * 256" in source
    for length in (129, 256, 257, 1023):
        ind.check(_row_sum(length), codegen, rtol=1e-5, atol=1e-5 * math.sqrt(length))


def test_long_softmax_rows_are_one_source_in_cpp(ind):
    """Online chunk loops run to ``red_len`` (rows past a row cache's 8192 elements)."""
    make = lambda length: _long_softmax(length, ind)  # noqa: E731
    source = _one_source(ind, make, (8193, 9001, 10007), "cpp", rtol=1e-5, atol=1e-7)
    assert "r0_start < red_len" in source
    ind.assert_simd_loops_vectorised(source, loading=True)


def test_sized_cpp_simd_loops_are_vectorised(ind):
    # a column loop over 24 columns is not reported vectorised with literal sizes either
    for graph in (_append(17), _middle(9)):
        (source,) = _sources(ind, graph, "cpp")
        ind.assert_simd_loops_vectorised(source)
    (source,) = _sources(ind, _row_sum(517), "cpp")
    assert "r0_lane < red_len - r0_lanes" in source  # the rest's lanes: a run-time count
    ind.assert_simd_loops_vectorised(source, loading=True)
