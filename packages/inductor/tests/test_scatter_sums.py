"""A scatter into zeros added to a tensor is a scatter into that tensor (``scatter_sums.py``),
run in place on a buffer of the graph's own (``in_place.py``): a tied embedding's gradient
accumulates into the head's half, with no zero fill and no add kernel."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import CompileOptions, GraphBuilder, Level, TensorMeta, aten, prim
from torchstrata.inductor import compile_graph
from torchstrata.inductor.passes.row_scatters import row_scatters
from torchstrata.inductor.passes.scatter_sums import scatter_into_addends

VOCAB, WIDTH, ROWS = 32, 8, 6


def _zeros(b: GraphBuilder, shape: tuple[int, ...]):
    return b.call(prim("full"), list(shape), 0.0, torch.float32, torch.device("cpu"))


def _tied_gradient(*, addend: str = "mm", scatter_returned: bool = False, swap: bool = False):
    """``mm(a, b) + scatter_add(zeros, 0, broadcast(index), rows)``: the two halves of a
    tied embedding's gradient (``addend="input"``: the other half is a graph input)."""
    b = GraphBuilder(Level.PRIMS)
    a = b.input("a", TensorMeta((VOCAB, ROWS), torch.float32))
    h = b.input("h", TensorMeta((ROWS, WIDTH), torch.float32))
    index = b.input("index", TensorMeta((ROWS,), torch.int64))
    rows = b.input("rows", TensorMeta((ROWS, WIDTH), torch.float32))
    y = b.input("y", TensorMeta((VOCAB, WIDTH), torch.float32))
    where = b.call(prim("broadcast_in_dim"), index, [ROWS, WIDTH], [0])
    scatter = b.call(prim("scatter_add"), _zeros(b, (VOCAB, WIDTH)), 0, where, rows)
    other = b.call(aten("mm.default"), a, h) if addend == "mm" else y
    total = b.call(prim("add"), *((other, scatter) if swap else (scatter, other)))
    return b.build([total, scatter] if scatter_returned else [total])


def _inputs():
    torch.manual_seed(0)
    index = torch.tensor([3, 7, 3, 0, 31, 7])  # repeated rows accumulate
    return (
        torch.randn(VOCAB, ROWS),
        torch.randn(ROWS, WIDTH),
        index,
        torch.randn(ROWS, WIDTH),
        torch.randn(VOCAB, WIDTH),
    )


def _eager(a, h, index, rows, y, addend="mm"):
    other = a @ h if addend == "mm" else y
    return torch.zeros(VOCAB, WIDTH).index_add_(0, index, rows) + other


def _ops(graph) -> list[str]:
    return [node.op.name for node in graph.nodes if node.op is not None]


@pytest.mark.parametrize("swap", [False, True], ids=["scatter first", "scatter second"])
def test_the_add_becomes_a_scatter_into_the_other_addend(swap):
    graph = scatter_into_addends(_tied_gradient(swap=swap))
    (output,) = graph.outputs
    assert output.op == prim("scatter_add")
    assert output.args[0].op == aten("mm.default")
    assert "prims.add" not in _ops(graph)


def test_a_scatter_read_elsewhere_is_left_alone():
    graph = _tied_gradient(scatter_returned=True)
    assert scatter_into_addends(graph) is graph


def test_a_broadcast_addend_is_scattered_into_not_updated(ind):
    b = GraphBuilder(Level.PRIMS)
    index = b.input("index", TensorMeta((ROWS,), torch.int64))
    rows = b.input("rows", TensorMeta((ROWS, WIDTH), torch.float32))
    bias = b.input("bias", TensorMeta((WIDTH,), torch.float32))
    where = b.call(prim("broadcast_in_dim"), index, [ROWS, WIDTH], [0])
    scatter = b.call(prim("scatter_add"), _zeros(b, (VOCAB, WIDTH)), 0, where, rows)
    wide = b.call(prim("broadcast_in_dim"), bias, [VOCAB, WIDTH], [1])
    graph = b.build([b.call(prim("add"), scatter, wide)])
    rewritten = scatter_into_addends(graph)
    assert "prims.add" not in _ops(rewritten)  # the broadcast has the add's shape: exact
    torch.manual_seed(0)
    args = (torch.tensor([1, 1, 2, 5, 0, 31]), torch.randn(ROWS, WIDTH), torch.randn(WIDTH))
    compiled = _compiled(ind, graph)
    assert "in place" not in compiled.launcher_source  # a view of one row: never updated
    want = torch.zeros(VOCAB, WIDTH).index_add_(0, args[0], args[1]) + args[2]
    torch.testing.assert_close(compiled(*args)[0], want)


def _compiled(ind, graph, codegen="cpp"):
    options = CompileOptions(codegen=ind.backend(codegen), cache_dir=ind.cache_dir)
    return compile_graph(graph, "cpu", options)


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_the_tied_gradient_accumulates_into_the_matmul_in_place(ind, codegen, monkeypatch):
    if codegen == "triton":
        pytest.importorskip("triton")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    compiled = _compiled(ind, _tied_gradient(), codegen)
    source = compiled.launcher_source
    assert "aten.index_add.default" in source and ", in place" in source
    assert "full" not in source  # no zero fill
    assert sorted(compiled.eager_ops) == ["aten.index_add.default", "aten.mm.default"]
    assert not compiled.kernels  # no zero fill, no add, no index broadcast
    args = _inputs()
    (total,) = compiled(*args)
    torch.testing.assert_close(total, _eager(*args))


def test_a_graph_input_addend_is_never_updated(ind):
    compiled = _compiled(ind, _tied_gradient(addend="input"))
    assert "in place" not in compiled.launcher_source
    args = _inputs()
    y = args[4].clone()
    (total,) = compiled(*args)
    torch.testing.assert_close(args[4], y)  # the caller's tensor is left as it was
    torch.testing.assert_close(total, _eager(*args, addend="input"))


def test_a_buffer_read_after_the_update_is_not_updated(ind):
    """The matmul is also returned after the scatter: it must keep its value."""
    b = GraphBuilder(Level.PRIMS)
    a = b.input("a", TensorMeta((VOCAB, ROWS), torch.float32))
    h = b.input("h", TensorMeta((ROWS, WIDTH), torch.float32))
    index = b.input("index", TensorMeta((ROWS,), torch.int64))
    rows = b.input("rows", TensorMeta((ROWS, WIDTH), torch.float32))
    mm = b.call(aten("mm.default"), a, h)
    where = b.call(prim("broadcast_in_dim"), index, [ROWS, WIDTH], [0])
    scattered = b.call(prim("scatter_add"), mm, 0, where, rows)
    later = b.call(prim("mul"), mm, 2.0)
    compiled = _compiled(ind, b.build([scattered, later]))
    assert "in place" not in compiled.launcher_source
    args = _inputs()[:4]
    got, twice = compiled(*args)
    product = args[0] @ args[1]
    torch.testing.assert_close(got, product.index_add(0, args[2], args[3]))
    torch.testing.assert_close(twice, product * 2)


def test_an_untied_embedding_gradient_is_an_index_add_into_its_zeros(ind):
    """The rows scattered along dim 0 with a broadcast 1-D index: ``index_add`` in place
    on the zero fill, no index kernel, no copy of the zeros."""
    b = GraphBuilder(Level.PRIMS)
    index = b.input("index", TensorMeta((ROWS,), torch.int64))
    rows = b.input("rows", TensorMeta((ROWS, WIDTH), torch.float32))
    where = b.call(prim("broadcast_in_dim"), index, [ROWS, WIDTH], [0])
    scatter = b.call(prim("scatter_add"), _zeros(b, (VOCAB, WIDTH)), 0, where, rows)
    compiled = _compiled(ind, b.build([b.call(prim("mul"), scatter, 3.0)]))
    source = compiled.launcher_source
    assert "aten.index_add.default" in source and ", in place" in source
    assert compiled.eager_ops == ("aten.index_add.default",)
    assert len(compiled.kernels) == 2  # the zero fill, the product: no index kernel
    args = _inputs()[2:4]
    (got,) = compiled(*args)
    torch.testing.assert_close(got, torch.zeros(VOCAB, WIDTH).index_add_(0, *args) * 3)


def test_a_scatter_of_single_elements_stays_a_scatter():
    b = GraphBuilder(Level.PRIMS)
    index = b.input("index", TensorMeta((ROWS, WIDTH), torch.int64))
    rows = b.input("rows", TensorMeta((ROWS, WIDTH), torch.float32))
    graph = b.build([b.call(prim("scatter_add"), _zeros(b, (VOCAB, WIDTH)), 0, index, rows)])
    assert row_scatters(graph) is graph
