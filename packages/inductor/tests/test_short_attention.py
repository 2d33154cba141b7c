"""CPU flash attention over short sequences as ATen matmuls and fused softmax kernels
(``cpp.short_attention``, decision 0290): the same numbers as ATen's flash kernels,
forward and backward, causal or not; the pass leaves other attentions alone."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import CompileOptions, Graph, GraphBuilder, Level, TensorMeta, aten, prim
from torchstrata.inductor import compile_graph
from torchstrata.inductor.passes.short_attention import MAX_SHORT_TOKENS, short_attention

FORWARD = aten("_scaled_dot_product_flash_attention_for_cpu.default")
BACKWARD = aten("_scaled_dot_product_flash_attention_for_cpu_backward.default")
B, H, D = 2, 4, 32


def _attention_graph(
    tokens: int,
    *,
    causal: bool = True,
    scale: float | None = None,
    dtype: torch.dtype = torch.float32,
    dropout: float = 0.0,
    kv_heads: int = H,
) -> Graph:
    """A GPT layer's attention: q, k, v as head views of one ``[B, T, 3 * H * D]`` value
    (strided, as the qkv projection gives them), forward and backward, every result."""
    b = GraphBuilder(Level.PRIMS)
    qkv = b.input("qkv", TensorMeta((B, tokens, 3 * H * D), dtype))
    grad = b.input("grad", TensorMeta((B, H, tokens, D), dtype))
    c = H * D
    parts = [
        b.call(prim("slice"), qkv, [0, 0, i * c], [B, tokens, (i + 1) * c], [1, 1, 1])
        for i in range(3)
    ]
    q, k, v = (
        b.call(prim("permute"), b.call(prim("reshape"), part, [B, tokens, H, D]), [0, 2, 1, 3])
        for part in parts
    )
    if kv_heads != H:
        k, v = (
            b.call(prim("slice"), x, [0, 0, 0, 0], [B, kv_heads, tokens, D], [1, 1, 1, 1])
            for x in (k, v)
        )
    extra = {"scale": scale} if scale is not None else {}
    forward = b.call(FORWARD, q, k, v, dropout, causal, **extra)
    out, lse = b.getitem(forward, 0), b.getitem(forward, 1)
    backward = b.call(BACKWARD, grad, q, k, v, out, lse, dropout, causal, attn_mask=None, **extra)
    grads = [b.getitem(backward, i) for i in range(3)]
    return b.build([out, lse, *grads])


def _eager(qkv: torch.Tensor, grad: torch.Tensor, causal: bool, scale: float | None):
    q, k, v = (part.unflatten(2, (H, D)).transpose(1, 2) for part in qkv.chunk(3, dim=2))
    ops = torch.ops.aten
    out, lse = ops._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
    grads = ops._scaled_dot_product_flash_attention_for_cpu_backward(
        grad, q, k, v, out, lse, 0.0, causal, scale=scale
    )
    return (out, lse, *grads)


def _ops(graph: Graph) -> set[str]:
    return {str(node.op) for node in graph.nodes}


@pytest.mark.parametrize(("causal", "scale"), [(True, None), (False, None), (True, 0.3)])
def test_matches_the_flash_kernels(causal: bool, scale: float | None, tmp_path) -> None:
    """GPT's sizes (T = 64): every result, its values and strides, as ATen's flash
    attention forward and backward give them."""
    graph = _attention_graph(64, causal=causal, scale=scale)
    rewritten = short_attention(graph)
    assert str(FORWARD) not in _ops(rewritten) and str(BACKWARD) not in _ops(rewritten)
    assert "aten.matmul.default" in _ops(rewritten)
    options = CompileOptions(codegen="cpp", cache_dir=tmp_path)
    compiled = compile_graph(graph, "cpu", options)
    assert "# aten._scaled_dot_product_flash" not in compiled.launcher_source
    torch.manual_seed(0)
    qkv, grad = torch.randn(B, 64, 3 * H * D), torch.randn(B, H, 64, D)
    got = compiled(qkv, grad)
    expected = _eager(qkv, grad, causal, scale)
    for value, reference in zip(got, expected, strict=True):
        torch.testing.assert_close(value, reference, rtol=1e-5, atol=2e-5)
        assert value.stride() == reference.stride()


def test_blocked_keeps_the_flash_kernels(tmp_path) -> None:
    """``blocked_plugins=["cpp.short_attention"]`` compiles the flash calls as before."""
    options = CompileOptions(
        codegen="cpp", cache_dir=tmp_path, blocked_plugins=["cpp.short_attention"]
    )
    compiled = compile_graph(_attention_graph(64), "cpu", options)
    assert "# aten._scaled_dot_product_flash_attention_for_cpu.default" in compiled.launcher_source
    assert "# aten._scaled_dot_product_flash_attention_for_cpu_backward.default" in (
        compiled.launcher_source
    )


@pytest.mark.parametrize(
    "graph",
    [
        _attention_graph(MAX_SHORT_TOKENS + 1),
        _attention_graph(64, dtype=torch.bfloat16),
        _attention_graph(64, dropout=0.1),
        _attention_graph(64, kv_heads=2),
    ],
    ids=["long", "bf16", "dropout", "grouped-heads"],
)
def test_other_attentions_are_left_alone(graph: Graph) -> None:
    """Longer sequences, 16-bit dtypes, dropout and grouped heads keep ATen's kernels."""
    assert short_attention(graph) is graph
