"""Values shared down a chain are stored, so kernels stop growing with depth.

A residual stream ``x_k = x_(k-1) + f_k`` read by each block's norm was inlined into every
later norm: the kernel of block k loaded k + 1 buffers, and no two blocks' kernels were
the same. A residual gradient reshaped for a matmul was a copy kernel that recomputed the
whole sum.
"""

from __future__ import annotations

import torch

from torchstrata.core import Graph, GraphBuilder, Level, Node, TensorMeta, aten, prim
from torchstrata.inductor.codegen.backend import CppBackend
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.passes.identity_views import drop_identity_views
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import Plan, plan_graph

ROWS, WIDTH = 8, 16


def _norm(b: GraphBuilder, x: Node) -> Node:
    total = b.call(prim("sum"), x, (1,))
    mean = b.call(prim("div"), total, float(WIDTH))
    centred = b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), mean, (ROWS, WIDTH), (0,)))
    squares = b.call(prim("sum"), b.call(prim("mul"), centred, centred), (1,))
    scale = b.call(prim("rsqrt"), b.call(prim("add"), squares, 1e-5))
    return b.call(
        prim("mul"), centred, b.call(prim("broadcast_in_dim"), scale, (ROWS, WIDTH), (0,))
    )


def _residual_blocks(count: int) -> tuple[Graph, list[Node]]:
    """``x = x + mm(norm(x), w)`` ``count`` times; only the last norm is an output."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((ROWS, WIDTH), torch.float32))
    streams = []
    for i in range(count):
        w = b.input(f"w{i}", TensorMeta((WIDTH, WIDTH), torch.float32))
        x = b.call(prim("add"), x, b.call(aten("mm.default"), _norm(b, x), w))
        streams.append(x)
    return b.build([_norm(b, x)]), streams


def _plan(graph: Graph) -> Plan:
    return plan_graph(graph, lower_graph(graph, CppBackend().supports))


def _kernels(plan: Plan) -> list[Kernel]:
    return [step for step in plan.steps if isinstance(step, Kernel)]


def test_the_residual_stream_is_stored_once_per_block():
    graph, streams = _residual_blocks(6)
    plan = _plan(graph)
    # every x_k read by a later block is stored; the last one is read by the final norm only
    assert set(streams[:-1]) <= plan.stored
    widest = max(len(kernel.args) for kernel in _kernels(plan))
    assert widest <= 6, [len(kernel.args) for kernel in _kernels(plan)]


def test_kernels_do_not_grow_with_depth():
    small = _kernels(_plan(_residual_blocks(3)[0]))
    large = _kernels(_plan(_residual_blocks(9)[0]))
    assert max(len(k.args) for k in large) == max(len(k.args) for k in small)
    assert len(large) - len(small) == 6  # one norm kernel per added block


def test_a_shared_value_reshaped_for_an_extern_call_is_a_view_of_its_buffer():
    b = GraphBuilder(Level.PRIMS)
    a = b.input("a", TensorMeta((2, 4, WIDTH), torch.float32))
    c = b.input("c", TensorMeta((2, 4, WIDTH), torch.float32))
    w = b.input("w", TensorMeta((WIDTH, WIDTH), torch.float32))
    grad = b.call(prim("add"), a, c)
    flat = b.call(prim("reshape"), grad, (8, WIDTH))
    product = b.call(aten("mm.default"), flat, w)
    after = b.call(prim("mul"), grad, 2.0)
    graph = b.build([product, after])
    plan = _plan(graph)
    view = plan.view(flat)
    assert view is not None and view.base is grad, view
    stored = {store.buffer for k in _kernels(plan) for store in k.full_stores + k.row_stores}
    assert "buf_" + flat.name not in stored
    assert "buf_" + grad.name in stored


def test_blocking_the_rule_inlines_the_stream_again():
    graph, streams = _residual_blocks(6)
    plan = plan_graph(graph, lower_graph(graph, CppBackend().supports), store_shared=False)
    assert not set(streams[:-1]) & plan.stored
    assert max(len(kernel.args) for kernel in _kernels(plan)) > 6


def test_a_transposed_extern_operand_is_a_view_not_a_copy_kernel():
    b = GraphBuilder(Level.PRIMS)
    a = b.input("a", TensorMeta((ROWS, WIDTH), torch.float32))
    w = b.input("w", TensorMeta((WIDTH, WIDTH), torch.float32))
    grad = b.call(prim("mul"), a, 3.0)
    first = b.call(aten("mm.default"), grad, w)
    flipped = b.call(prim("permute"), grad, (1, 0))
    second = b.call(aten("mm.default"), flipped, a)
    graph = b.build([first, second])
    plan = _plan(graph)
    view = plan.view(flipped)
    assert view is not None and view.base is grad and view.strides == (1, WIDTH), view
    assert len(_kernels(plan)) == 1  # the product's kernel; no copy of its transpose


def test_a_weight_gradient_transposed_twice_is_the_matmul_result():
    b = GraphBuilder(Level.PRIMS)
    a = b.input("a", TensorMeta((ROWS, WIDTH), torch.float32))
    g = b.input("g", TensorMeta((ROWS, WIDTH), torch.float32))
    product = b.call(aten("mm.default"), b.call(prim("permute"), g, (1, 0)), a)
    twice = b.call(prim("permute"), b.call(prim("permute"), product, (1, 0)), (1, 0))
    graph = drop_identity_views(b.build([twice]))
    (output,) = graph.outputs
    assert str(output.op) == "aten.mm.default"
    assert not _kernels(_plan(graph))  # no copy kernel left
