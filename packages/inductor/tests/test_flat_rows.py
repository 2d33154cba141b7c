"""Kernels generated for several numbers of rows are one source (decision 0201): the C++
loop over rows runs to the ``rows`` argument, and contiguous leading row dims are one
(``codegen/flat_rows.py``); where an index reads one row dim alone, the dims stay."""

from __future__ import annotations

import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.backend import CppBackend
from torchstrata.inductor.codegen.cpp.row_sizes import outer_rows
from torchstrata.inductor.codegen.flat_rows import flatten_rows
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph


def _kernels(graph) -> list[Kernel]:
    backend = CppBackend()
    lowered = lower_graph(graph, backend.supports)
    return [step for step in plan_graph(graph, lowered).steps if isinstance(step, Kernel)]


def _row_sums(batch: int, length: int, positional: bool):
    """``sum(x (+ p), -1)`` over ``x [batch, length, 32]``; ``p [length, 32]`` is read per
    position (its index names the position alone)."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((batch, length, 32), torch.float32))
    value = b.call(prim("exp"), x)
    if positional:
        p = b.input("p", TensorMeta((length, 32), torch.float32))
        wide = b.call(prim("broadcast_in_dim"), p, (batch, length, 32), (1, 2))
        value = b.call(prim("add"), value, wide)
    return b.build([b.call(prim("sum"), value, (2,))])


def test_kernels_over_batch_and_sequence_rows_are_one_source():
    backend = CppBackend()
    sources = set()
    for length in (16, 17, 5):
        (kernel,) = _kernels(_row_sums(2, length, positional=False))
        assert kernel.row_shape == (2, length)
        assert flatten_rows(kernel).row_shape == (2 * length,)
        assert outer_rows(flatten_rows(kernel)) == 2 * length
        sources.add(backend.generate(kernel, frozenset()))
    assert len(sources) == 1
    assert "xi < row_hi" in sources.pop()


def test_rows_read_per_position_keep_their_dims():
    (kernel,) = _kernels(_row_sums(2, 16, positional=True))
    assert flatten_rows(kernel).row_shape == (2, 16)
    backend = CppBackend()
    (other,) = _kernels(_row_sums(2, 17, positional=True))
    assert backend.generate(kernel, frozenset()) != backend.generate(other, frozenset())


def test_flattened_and_positional_rows_match_the_interpreter(ind):
    for positional in (False, True):
        for length in (7, 16):
            ind.check(_row_sums(3, length, positional), "cpp", rtol=1e-5, atol=1e-5)
