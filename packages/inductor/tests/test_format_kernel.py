"""``format_kernel``: the loop IR printed for people, one line per value, reduction and store."""

from __future__ import annotations

import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.cpp.exprs import supports
from torchstrata.inductor.ir.format import format_index, format_kernel
from torchstrata.inductor.ir.indexing import Index, Var
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph


def _kernels(graph):
    plan = plan_graph(graph, lower_graph(graph, supports))
    return [step for step in plan.steps if isinstance(step, Kernel)]


def test_softmax_prints_its_reductions_values_and_store(ind):
    (kernel,) = _kernels(ind.demo_graph(8, 64))
    text = format_kernel(kernel)
    lines = text.splitlines()
    assert lines[0] == f"kernel {kernel.name} rows [8] x reduce [64]"
    assert lines[1] == "  args: " + ", ".join(f"{a.name} f32" for a in kernel.args)
    assert {a.name for a in kernel.args} >= {"buf_x", "buf_b"}
    assert [line.split()[0] for line in lines if line.startswith("  reduce")] == ["reduce"] * 2
    assert any(" = erf(" in line for line in lines)
    assert any(" = exp(" in line for line in lines)
    (store,) = kernel.full_stores
    assert lines[-1].startswith(f"  store {store.buffer}[")


def test_each_value_is_printed_once():
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 8), torch.float32))
    e = b.call(prim("exp"), x)
    graph = b.build([b.call(prim("mul"), e, e)])
    (kernel,) = _kernels(graph)
    text = format_kernel(kernel)
    assert text.count(" = exp(") == 1
    assert text.count(" = load buf_x[") == 1
    assert "mul(%1, %1)" in text


def test_index_printout():
    x0, r0 = Var("x0", 8), Var("r0", 64)
    index = Index.of(x0) * 64 + Index.of(r0).floordiv(4) + 3
    assert format_index(index) == "(r0 // 4) + 64*x0 + 3"
    assert format_index(Index()) == "0"
