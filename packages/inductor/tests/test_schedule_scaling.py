"""The scheduler's work grows linearly with the graph: a count, not a timing.

A model of repeated blocks asks the scheduler the same questions once per block: the
expressions it builds (values asked of a kernel group, with the fusions it tries) must
grow in proportion to the blocks. Before fusions past a refusal were cut short, a value
of each block that reads a matmul's result tried every earlier group of its shape, and
each try rebuilt every member: the work grew with the square of the depth.
"""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import Graph, GraphBuilder, Level, TensorMeta, aten, prim
from torchstrata.inductor.codegen.triton.printer import supports
from torchstrata.inductor.schedule import scheduler
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph

ROWS, WIDTH = 8, 16


def _blocks(count: int) -> Graph:
    """``count`` pre-norm blocks ``x = x + mm(norm(x), w)``, each output kept."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((ROWS, WIDTH), torch.float32))
    outputs = []
    for i in range(count):
        w = b.input(f"w{i}", TensorMeta((WIDTH, WIDTH), torch.float32))
        total = b.call(prim("sum"), x, (1,))
        mean = b.call(prim("div"), total, float(WIDTH))
        centred = b.call(
            prim("sub"), x, b.call(prim("broadcast_in_dim"), mean, (ROWS, WIDTH), (0,))
        )
        squares = b.call(prim("sum"), b.call(prim("mul"), centred, centred), (1,))
        scale = b.call(prim("rsqrt"), b.call(prim("add"), squares, 1e-5))
        normed = b.call(
            prim("mul"), centred, b.call(prim("broadcast_in_dim"), scale, (ROWS, WIDTH), (0,))
        )
        projected = b.call(aten("mm.default"), normed, w)
        x = b.call(prim("add"), x, b.call(prim("tanh"), projected))
        outputs.append(x)
    return b.build(outputs)


def _values_built(graph: Graph, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many expressions of values the scheduler and the planner build for ``graph``."""
    calls = 0
    real = scheduler.GroupContext._value

    def counting(self, node, index):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return real(self, node, index)

    with monkeypatch.context() as patch:
        patch.setattr(scheduler.GroupContext, "_value", counting)
        lowered = lower_graph(graph, lambda name, dtype: supports(name, dtype, interpret=True))
        plan_graph(graph, lowered)
    return calls


def test_values_built_grow_linearly_with_blocks(monkeypatch):
    small = _values_built(_blocks(4), monkeypatch)
    large = _values_built(_blocks(8), monkeypatch)
    assert small > 0
    assert large <= 2.2 * small, (small, large)
