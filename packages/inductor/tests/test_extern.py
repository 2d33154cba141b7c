"""Extern ATen calls between kernels, the plugin hook, backend selection and the cache."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import (
    NO_CONTRACT,
    CompileOptions,
    GraphBuilder,
    Level,
    TensorMeta,
    aten,
    create_plugin_manager,
    prim,
)
from torchstrata.inductor import CodegenError, compile_graph, plugin
from torchstrata.inductor.codegen.cpp.build import openmp_link_flags


def _mlp_graph():
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((8, 16), torch.float32))
    w = b.input("w", TensorMeta((16, 12), torch.float32))
    h = b.call(prim("mul"), b.call(prim("add"), x, 1.0), 0.5)
    mm = b.call(aten("mm.default"), h, w)
    out = b.call(prim("exp"), b.call(prim("neg"), mm))
    return b.build([out])


def test_extern_mm_between_pointwise_chains(ind, codegen):
    compiled = ind.check(_mlp_graph(), codegen, atol=1e-5, rtol=1e-4)
    assert compiled.eager_ops == ("aten.mm.default",)
    assert len(compiled.kernels) == 2
    launcher = compiled.launcher_source
    assert launcher.index("kernel0") < launcher.index("aten.mm.default") < launcher.index("kernel1")


def test_extern_with_tuple_result_and_getitem(ind, codegen):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((5, 6), torch.float32))
    pair = b.call(aten("max.dim"), b.call(prim("mul"), x, 3.0), 1)
    values = b.getitem(pair, 0)
    compiled = ind.check(b.build([b.call(prim("add"), values, 1.0), b.getitem(pair, 1)]), codegen)
    assert "aten.max.dim" in compiled.eager_ops


def test_plugin_hook_adapts_compile_graph(ind):
    manager = create_plugin_manager(load_entrypoints=False, plugins=[("inductor", plugin)])
    torchstrata_codegen = manager.hook.torchstrata_codegen
    compiled = torchstrata_codegen(
        graph=ind.demo_graph(4, 8),
        device=torch.device("cpu"),
        options=CompileOptions(cache_dir=ind.cache_dir),
        contract=NO_CONTRACT,
    )
    assert compiled.kernels[0].backend == "cpp"
    assert (
        torchstrata_codegen(
            graph=ind.demo_graph(4, 8),
            device=torch.device("cpu"),
            options=CompileOptions(codegen="eager"),
            contract=NO_CONTRACT,
        )
        is None
    )
    with pytest.raises(CodegenError, match="registered: cpp, eager, triton"):
        torchstrata_codegen(
            graph=ind.demo_graph(4, 8),
            device=torch.device("cpu"),
            options=CompileOptions(codegen="numpy"),
            contract=NO_CONTRACT,
        )


def test_cpp_on_cuda_is_an_error(ind):
    with pytest.raises(CodegenError, match="C\\+\\+"):
        compile_graph(ind.demo_graph(4, 8), "cuda", CompileOptions(codegen="cpp"))


def test_cpp_cache_is_reused(ind, tmp_path):
    options = CompileOptions(codegen="cpp", cache_dir=str(tmp_path))
    first = compile_graph(ind.demo_graph(5, 7), "cpu", options)
    second = compile_graph(ind.demo_graph(5, 7), "cpu", options)
    assert first.stats["compile_seconds"] > 0
    assert second.stats["compile_seconds"] == 0
    assert first.kernels[0].path == second.kernels[0].path
    assert not list(tmp_path.glob("*.tmp"))


def test_linear_gelu_linear_softmax(ind, codegen):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((6, 10), torch.float32))
    w1 = b.input("w1", TensorMeta((20, 10), torch.float32))
    b1 = b.input("b1", TensorMeta((20,), torch.float32))
    w2 = b.input("w2", TensorMeta((7, 20), torch.float32))
    h = b.call(aten("mm.default"), x, b.call(aten("t.default"), w1))
    h = b.call(prim("add"), h, b.call(prim("broadcast_in_dim"), b1, (6, 20), (1,)))
    o = b.call(aten("mm.default"), ind.gelu(b, h), b.call(prim("permute"), w2, (1, 0)))
    compiled = ind.check(b.build([ind.softmax_last(b, o)]), codegen, atol=1e-5, rtol=1e-4)
    # bias+gelu after the first matmul, softmax after the second; the permuted weight
    # reaches the matmul as a torch view (as_strided), never a copy kernel.
    assert compiled.eager_ops == ("aten.t.default", "aten.mm.default", "aten.mm.default")
    assert len(compiled.kernels) == 2
    assert "buf_w2.as_strided((20, 7), (1, 20))" in compiled.launcher_source


def test_an_extern_reads_a_view_at_an_offset_of_an_offset_input(ind, codegen):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((6, 10), torch.float32))
    w = b.input("w", TensorMeta((12, 10), torch.float32))
    rows = b.call(prim("slice"), w, (3, 0), (11, 10), (1, 1))  # rows 3..10: offset 30
    out = b.call(aten("mm.default"), x, b.call(prim("permute"), rows, (1, 0)))
    graph = b.build([b.call(prim("mul"), out, 2.0)])
    storage = torch.randn(200)
    w_value = storage[17:137].view(12, 10)  # the input itself starts at offset 17
    x_value = torch.randn(6, 10)
    compiled = ind.check(graph, codegen, inputs=[x_value, w_value], atol=1e-5, rtol=1e-4)
    assert "buf_w.storage_offset() + 30" in compiled.launcher_source
    torch.testing.assert_close(compiled(x_value, w_value)[0], x_value @ w_value[3:11].T * 2)


def test_softmax_over_the_first_dim(ind, codegen):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((9, 5), torch.float32))
    peak = b.call(prim("broadcast_in_dim"), b.call(prim("amax"), x, (0,)), (9, 5), (1,))
    e = b.call(prim("exp"), b.call(prim("sub"), x, peak))
    total = b.call(prim("broadcast_in_dim"), b.call(prim("sum"), e, (0,)), (9, 5), (1,))
    ind.check(b.build([b.call(prim("div"), e, total)]), codegen)


def test_kernels_link_a_renamed_torch_openmp_runtime(tmp_path):
    # torch wheels that bundle libgomp under a hashed name get it linked by name, so a
    # kernel never loads a second OpenMP runtime next to torch's.
    assert openmp_link_flags(tmp_path) == ()
    (tmp_path / "libgomp-a1b2c3.so.1").write_bytes(b"")
    flags = openmp_link_flags(tmp_path)
    assert "-l:libgomp-a1b2c3.so.1" in flags and "-Wl,--as-needed" in flags
    assert f"-Wl,-rpath,{tmp_path}" in flags
