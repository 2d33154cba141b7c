"""Kernels take the sizes a symbolic dim changes as arguments (decision 0250): a column
sum's reduced length (contiguous reduced dims walked as one), a row kernel's reduced
length and row stride, so kernels generated for several sizes are one source; what a
size decides (parallel pragma, chunking, row-cache arrays, masks) stays in the source."""

from __future__ import annotations

import math

import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.backend import CppBackend
from torchstrata.inductor.codegen.cpp.columns import uses_column_loop
from torchstrata.inductor.codegen.cpp.row_sizes import size_arguments
from torchstrata.inductor.codegen.flat_rows import flatten_reduced
from torchstrata.inductor.codegen.size_names import named_sizes, number
from torchstrata.inductor.ir.indexing import Index, Var
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph


def _kernels(graph) -> list[Kernel]:
    lowered = lower_graph(graph, CppBackend().supports)
    return [step for step in plan_graph(graph, lowered).steps if isinstance(step, Kernel)]


def _column_sum(batch: int, length: int, width: int = 24):
    """A bias gradient: ``sum(x * 2, (0, 1))`` over ``x [batch, length, width]``."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((batch, length, width), torch.float32))
    doubled = b.call(prim("mul"), x, 2.0)
    return b.build([b.call(prim("sum"), doubled, (0, 1))])


def _softmax(rows: int, length: int, ind):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, length), torch.float32))
    return b.build([ind.softmax_last(b, x)])


def test_contiguous_reduced_dims_are_walked_as_one():
    (kernel,) = _kernels(_column_sum(2, 17))
    flat = flatten_reduced(kernel)
    assert kernel.red_shape == (2, 17) and flat.red_shape == (34,)
    assert uses_column_loop(flat)
    (store_source,) = {str(spec.body) for spec in flat.reductions}
    assert "//" not in store_source and "%" not in store_source


def test_a_column_sum_is_one_source_for_every_reduced_length():
    backend = CppBackend()
    sources = set()
    for length in (16, 17, 5, 33):
        (kernel,) = _kernels(_column_sum(2, length))
        source = backend.generate(kernel, frozenset())
        sources.add(source)
        assert size_arguments(backend._rewritten(kernel)) == (2 * length,)
    assert len(sources) == 1
    assert "const int64_t red_rows" in sources.pop()


def test_a_chunked_column_sum_computes_its_chunking():
    backend = CppBackend()
    (kernel,) = _kernels(_column_sum(2, 1500, width=32))  # parallel: 96000 elements
    source = backend.generate(kernel, frozenset())
    assert size_arguments(backend._rewritten(kernel)) == (3000,)  # chunks: computed (0356)
    assert "red_chunks = wanted < most ? wanted : most;" in source
    assert "if (red_chunks == 1) {" in source and "#pragma omp parallel" in source


def test_a_softmax_is_one_source_over_lengths(ind):
    backend = CppBackend()
    sources = set()
    for length in (17, 23, 31, 33):  # the row cache's arrays: as long as any cached row (0357)
        (kernel,) = _kernels(_softmax(6, length, ind))
        sources.add(backend.generate(kernel, frozenset()))
    assert len(sources) == 1
    source = sources.pop()
    assert "r0 < red_len" in source and "red_len*x0" in source
    assert "row_cache0[8192]" in source


def test_named_sizes_print_only_inside_their_block():
    index = Index.of(Var("x0", 4)) * 17 + Index.of(Var("r0", 17))
    with named_sizes({17: "red_len"}):
        assert number(17) == "red_len" and number(16) == "16"
        assert index.render(str, "/", number) == "r0 + red_len*x0"
    assert number(17) == "17"


def test_sized_kernels_match_the_interpreter(ind, codegen):
    for length in (2, 3, 7, 17, 64, 300, 1500):
        # a column sum adds 3*length unit normals in another order than ATen: its
        # rounding error grows like the square root of the count (5.7e-5 at 4500 on an H100)
        atol = 1e-5 * math.sqrt(3 * length)
        for graph in (_column_sum(3, length), _softmax(5, length, ind)):
            ind.check(graph, codegen, rtol=1e-5, atol=atol)
