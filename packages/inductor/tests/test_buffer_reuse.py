"""Buffers handed on (``launcher.reuse_buffers``): an allocation takes the buffer of a kernel
store released before it with the same shape, strides, dtype and device, instead of
asking the allocator (and, for a large buffer, faulting fresh pages in)."""

from __future__ import annotations

import torch

from torchstrata.core import CompileOptions, GraphBuilder, Level, TensorMeta, aten, prim
from torchstrata.inductor import compile_graph
from torchstrata.inductor.launch.launcher import reuse_buffers

KIND = ((4, 8), (8, 1), torch.float32, "cpu")
OTHER = ((8, 4), (4, 1), torch.float32, "cpu")


def _alloc(name: str, shape=(4, 8), strides=(8, 1)) -> str:
    return f"    {name} = empty_strided({shape!r}, {strides!r}, dtype=dtype1, device=device2)"


def test_a_released_buffer_is_taken_by_the_next_allocation_of_its_kind():
    lines = [
        "def launch(buf_x):",
        _alloc("buf_a"),
        "    kernel0(buf_x.data_ptr(), buf_a.data_ptr())",
        _alloc("buf_b"),
        "    kernel1(buf_a.data_ptr(), buf_b.data_ptr())",
        "    del buf_a",
        _alloc("buf_c"),
        "    kernel2(buf_b.data_ptr(), buf_c.data_ptr())",
        "    del buf_b",
    ]
    out = reuse_buffers(lines, {"buf_a": KIND, "buf_b": KIND, "buf_c": KIND})
    assert out == [
        "def launch(buf_x):",
        _alloc("buf_a"),
        "    kernel0(buf_x.data_ptr(), buf_a.data_ptr())",
        _alloc("buf_b"),
        "    kernel1(buf_a.data_ptr(), buf_b.data_ptr())",
        "    buf_c = buf_a  # reused",
        "    del buf_a",
        "    kernel2(buf_b.data_ptr(), buf_c.data_ptr())",
        "    del buf_b",
    ]


def test_buffers_of_another_kind_or_not_reusable_are_released_as_before():
    lines = [
        "def launch(buf_x):",
        _alloc("buf_a"),
        "    kernel0(buf_x.data_ptr(), buf_a.data_ptr())",
        "    del buf_a, buf_x",
        _alloc("buf_c", (8, 4), (4, 1)),
        "    kernel2(buf_c.data_ptr())",
    ]
    assert reuse_buffers(lines, {"buf_a": KIND, "buf_c": OTHER}) == lines
    assert reuse_buffers(lines, {"buf_c": KIND}) == lines  # buf_a is not reusable


def _norm_rows(b: GraphBuilder, x, width: int):
    """Layer-norm-like rows: ``(x - mean) * rsqrt(var)``; two reductions and a store."""
    mean = b.call(prim("div"), b.call(prim("sum"), x, (1,)), float(width))
    centred = b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), mean, (16, width), (0,)))
    var = b.call(prim("sum"), b.call(prim("mul"), centred, centred), (1,))
    scale = b.call(prim("rsqrt"), b.call(prim("add"), var, 1e-5))
    return b.call(prim("mul"), centred, b.call(prim("broadcast_in_dim"), scale, (16, width), (0,)))


def test_a_residual_stream_reuses_its_buffers_and_matches_eager(ind):
    """``x = x + mm(norm(x), w)``: each ``x`` is stored (two kernels read it) and released
    a layer later, when the next layer's sum needs a buffer of its kind."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((16, 32), torch.float32))
    ws = [b.input(f"w{i}", TensorMeta((32, 32), torch.float32)) for i in range(4)]
    h = x
    for w in ws:
        h = b.call(prim("add"), h, b.call(aten("mm.default"), _norm_rows(b, h, 32), w))
    graph = b.build([b.call(prim("sum"), _norm_rows(b, h, 32), (1,))])
    options = CompileOptions(codegen=ind.backend("cpp"), cache_dir=ind.cache_dir)
    compiled = compile_graph(graph, "cpu", options)
    assert compiled.launcher_source.count("# reused") >= 1
    torch.manual_seed(0)
    args = [torch.randn(16, 32)] + [torch.randn(32, 32) / 6 for _ in ws]
    h = args[0]
    for w in args[1:]:
        h = h + torch.nn.functional.layer_norm(h, (32,), eps=1e-5) @ w
    want = torch.nn.functional.layer_norm(h, (32,), eps=1e-5).sum(1)
    torch.testing.assert_close(compiled(*args)[0], want, rtol=1e-4, atol=1e-4)


def test_a_buffer_viewed_for_a_matmul_is_released_with_its_last_view():
    """A store a matmul reads through the launcher's view is free once the store and every
    view of it are released, not at the store's own last use."""
    lines = [
        "def launch(buf_x, buf_w):",
        _alloc("buf_a"),
        "    kernel0(buf_x.data_ptr(), buf_a.data_ptr())",
        "    buf_t = buf_a.as_strided((8, 4), (1, 8))  # a view, no copy",
        "    del buf_a",
        _alloc("buf_b"),
        "    kernel1(buf_x.data_ptr(), buf_b.data_ptr())",
        "    buf_m = extern3(buf_t, buf_w)  # aten.mm.default",
        "    del buf_t",
        _alloc("buf_c"),
        "    kernel2(buf_b.data_ptr(), buf_m.data_ptr(), buf_c.data_ptr())",
    ]
    out = reuse_buffers(lines, {"buf_a": KIND, "buf_b": KIND, "buf_c": KIND}, {"buf_t": "buf_a"})
    # buf_b may not take buf_a (the matmul still reads it through buf_t); buf_c may
    assert "    buf_b = buf_a  # reused" not in out
    assert out[-3:] == [
        "    buf_c = buf_a  # reused",
        "    del buf_a",
        "    kernel2(buf_b.data_ptr(), buf_m.data_ptr(), buf_c.data_ptr())",
    ]


def test_matmul_operands_are_reused_and_the_results_match_eager(ind):
    """``h = y * tanh(y)``, ``y = mm(h, w)``, layer after layer: each ``h`` is a kernel
    store that a matmul reads (and, transposed, a second one), so it is free once both
    are done with it."""
    b = GraphBuilder(Level.PRIMS)
    h = b.input("x", TensorMeta((16, 32), torch.float32))
    ws = [b.input(f"w{i}", TensorMeta((32, 32), torch.float32)) for i in range(4)]
    outs = []
    for w in ws:
        y = b.call(aten("mm.default"), h, w)
        h = b.call(prim("mul"), y, b.call(prim("tanh"), y))
        outs.append(b.call(aten("mm.default"), b.call(prim("permute"), h, (1, 0)), h))
    graph = b.build([h, *outs])
    options = CompileOptions(codegen=ind.backend("cpp"), cache_dir=ind.cache_dir)
    compiled = compile_graph(graph, "cpu", options)
    assert compiled.launcher_source.count("# reused") >= 1
    torch.manual_seed(0)
    args = [torch.randn(16, 32)] + [torch.randn(32, 32) / 6 for _ in ws]
    h, want = args[0], []
    for w in args[1:]:
        y = h @ w
        h = y * torch.tanh(y)
        want.append(h.t() @ h)
    got = compiled(*args)
    torch.testing.assert_close(got[0], h, rtol=1e-4, atol=1e-5)
    for g, w in zip(got[1:], want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
