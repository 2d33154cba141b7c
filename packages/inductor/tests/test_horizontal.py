"""Horizontal fusion: small independent pointwise kernels of different shapes, one launch."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.triton.horizontal import (
    MAX_ELEMENTS,
    MAX_PARTS,
    fuse_horizontally,
)
from torchstrata.inductor.codegen.triton.printer import supports
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph


def _independent_outputs(dtype: torch.dtype = torch.float32):
    b = GraphBuilder(Level.PRIMS)
    a = b.input("a", TensorMeta((5, 7), dtype))
    v = b.input("v", TensorMeta((13,), dtype))
    c = b.input("c", TensorMeta((3, 1, 4), dtype))
    row = b.input("row", TensorMeta((4,), dtype))
    doubled = b.call(prim("mul"), a, 2.0)
    exps = b.call(prim("exp"), v)
    shifted = b.call(prim("add"), c, b.call(prim("broadcast_in_dim"), row, (3, 1, 4), (2,)))
    # Reads the first output: depends on the run, so it starts a kernel of its own.
    first_row = b.call(prim("slice"), doubled, (0, 0), (1, 7), (1, 1))
    tripled = b.call(prim("mul"), b.call(prim("reshape"), first_row, (7,)), 3.0)
    return b.build([doubled, exps, shifted, tripled])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_independent_small_kernels_share_one_launch(ind, codegen, dtype):
    graph = _independent_outputs(dtype)
    compiled = ind.check(graph, codegen, seeds=(0, 1), atol=1e-2, rtol=1e-2)
    if codegen == "cpp":
        assert len(compiled.kernels) == 4  # C++ calls are cheap: nothing merged
    else:
        assert len(compiled.kernels) == 2  # three merged, the dependent one after them
        assert "gindex" in compiled.kernels[0].source


def _plan_kernels(graph):
    lowered = lower_graph(graph, lambda name, dtype: supports(name, dtype, interpret=True))
    return plan_graph(graph, lowered).steps


def test_runs_stop_at_dependencies_sizes_and_reductions():
    steps = _plan_kernels(_independent_outputs())
    fused = fuse_horizontally(steps)
    assert [len(step.parts) for step in fused if isinstance(step, Kernel)] == [3, 0]
    merged = fused[0]
    assert merged.rows == 35 + 13 + 12
    assert {s.buffer for s in merged.row_stores} == {
        s.buffer for step in steps[:3] for s in step.row_stores
    }

    b = GraphBuilder(Level.PRIMS)
    big = b.input("big", TensorMeta((MAX_ELEMENTS + 1,), torch.float32))
    small = b.input("small", TensorMeta((9,), torch.float32))
    x = b.input("x", TensorMeta((4, 6), torch.float32))
    outs = [
        b.call(prim("neg"), big),
        b.call(prim("neg"), small),
        b.call(prim("sum"), x, (1,)),
        b.call(prim("abs"), small),
    ]
    fused = fuse_horizontally(_plan_kernels(b.build(outs)))
    assert all(not step.parts for step in fused if isinstance(step, Kernel))


def test_at_most_max_parts_per_launch():
    b = GraphBuilder(Level.PRIMS)
    outs = []
    for i in range(MAX_PARTS + 3):
        x = b.input(f"x{i}", TensorMeta((i + 2,), torch.float32))
        outs.append(b.call(prim("neg"), x))
    fused = fuse_horizontally(_plan_kernels(b.build(outs)))
    assert [len(step.parts) for step in fused] == [MAX_PARTS, 3]


def test_a_horizontal_kernel_compiles_for_sm90(tmp_path):
    pytest.importorskip("triton")
    from torchstrata.inductor.codegen.triton.ptx import kernel_ptx
    from torchstrata.inductor.codegen.triton.tuning import Config

    graph = _independent_outputs(torch.bfloat16)
    lowered = lower_graph(graph, lambda name, dtype: supports(name, dtype, interpret=False))
    merged = fuse_horizontally(plan_graph(graph, lowered).steps)[0]
    assert merged.parts
    ptx = kernel_ptx(merged, Config(1024, 1, 4, True), cache_dir=str(tmp_path))
    assert ptx.count("st.global") >= 3  # one store per part
