"""Tuned launch configurations are kept per bucket of row counts (decision 0225): the
sizes of one power-of-two bucket share a key (and so a tuned configuration) although
their sources differ in what the exact row count decides (a divisor hint, masks dropped
where every block divides the rows); another bucket or another kernel does not."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta
from torchstrata.inductor.codegen.triton.printer import supports
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph

pytest.importorskip("triton")

from torchstrata.inductor.codegen.triton.backend import TritonBackend
from torchstrata.inductor.codegen.triton.tuning import rows_bucket, tuning_key


def _kernel(ind, rows: int, length: int) -> Kernel:
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, length), torch.float32))
    graph = b.build([ind.softmax_last(b, x)])
    lowered = lower_graph(graph, lambda name, dtype: supports(name, dtype, interpret=False))
    (kernel,) = [step for step in plan_graph(graph, lowered).steps if isinstance(step, Kernel)]
    return kernel


def _key(ind, rows: int, length: int = 64) -> tuple[str, tuple[str, ...], tuple]:
    kernel, configs, generated = TritonBackend(interpret=False).generate(
        _kernel(ind, rows, length), clusters=False
    )
    sources = tuple(source for _, source in generated)
    return tuning_key(sources, "a GPU", kernel.rows, kernel.row_length), sources, tuple(configs)


def test_row_counts_of_one_bucket_share_a_tuned_configuration(ind):
    keys = {rows: _key(ind, rows) for rows in (17, 20, 24, 32, 40)}
    assert {rows_bucket(rows) for rows in (17, 20, 24, 32)} == {32}
    # the sources differ: no hint (17), divisor 4 (20), divisor 8 (24), no masks (32)
    assert len({keys[rows][1] for rows in (17, 20, 24, 32)}) == 4
    # one key, and the same candidates, for the bucket of 32
    assert len({keys[rows][0] for rows in (17, 20, 24, 32)}) == 1
    assert len({keys[rows][2] for rows in (17, 20, 24, 32)}) == 1
    assert keys[40][0] != keys[32][0]  # the next bucket is tuned again
    # sources serve every row length since decision 0250: the length's bucket keys them
    assert _key(ind, 24, length=128)[0] != keys[24][0]  # another bucket of lengths
    assert _key(ind, 24, length=48)[0] == keys[24][0]  # the same bucket (64) of lengths


def test_the_bucket_is_the_next_power_of_two():
    assert [rows_bucket(n) for n in (2, 3, 5, 16, 17, 1000, 1024, 1025)] == [
        2, 4, 8, 16, 32, 1024, 1024, 2048
    ]  # fmt: skip
