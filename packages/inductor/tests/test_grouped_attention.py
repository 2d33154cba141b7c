"""CPU flash attention reads grouped-query key/value heads unrepeated
(``inductor.grouped_query_attention``, decision 0232)."""

from __future__ import annotations

import torch

from torchstrata.core import Graph, GraphBuilder, Level, Node, TensorMeta, aten, prim
from torchstrata.inductor.passes.grouped_attention import grouped_query_attention

ATTENTION = aten("_scaled_dot_product_flash_attention_for_cpu.default")
B, HEADS, KV_HEADS, T, D = 2, 6, 2, 16, 8


def _repeat_kv(b: GraphBuilder, kv: Node, repeats: int) -> Node:
    """``kv[:, :, None].expand(B, h, r, T, D).reshape(B, h * r, T, D)``, decomposed."""
    heads = kv.tensor_meta.shape[1]
    unsqueezed = b.call(prim("broadcast_in_dim"), kv, [B, heads, 1, T, D], [0, 1, 3, 4])
    expanded = b.call(
        prim("broadcast_in_dim"), unsqueezed, [B, heads, repeats, T, D], [0, 1, 2, 3, 4]
    )
    copied = b.call(prim("mul"), expanded, 1)
    return b.call(prim("reshape"), copied, [B, heads * repeats, T, D])


def _tile_kv(b: GraphBuilder, kv: Node, repeats: int) -> Node:
    """``kv[:, None].expand(B, r, h, T, D).reshape(B, r * h, T, D)``: head ``i`` is
    ``kv``'s head ``i % h``, not what grouped-query attention computes."""
    heads = kv.tensor_meta.shape[1]
    tiled = b.call(prim("broadcast_in_dim"), kv, [B, repeats, heads, T, D], [0, 2, 3, 4])
    return b.call(prim("reshape"), b.call(prim("mul"), tiled, 1), [B, repeats * heads, T, D])


def _attention(key_repeat, value_repeat, value_heads: int = KV_HEADS) -> Graph:
    b = GraphBuilder(Level.PRIMS)
    q = b.input("q", TensorMeta((B, HEADS, T, D), torch.float32))
    k = b.input("k", TensorMeta((B, KV_HEADS, T, D), torch.float32))
    v = b.input("v", TensorMeta((B, value_heads, T, D), torch.float32))
    key = key_repeat(b, k, HEADS // KV_HEADS)
    value = value_repeat(b, v, HEADS // value_heads)
    attention = b.call(ATTENTION, q, key, value, is_causal=True)
    out = b.call(prim("exp"), b.getitem(attention, 0))
    return b.build([out])


def _attention_node(graph: Graph) -> Node:
    (node,) = [node for node in graph.nodes if node.op == ATTENTION]
    return node


def test_attention_reads_the_unrepeated_heads() -> None:
    graph = _attention(_repeat_kv, _repeat_kv)
    rewritten = grouped_query_attention(graph)
    node = _attention_node(rewritten)
    assert [arg.name for arg in node.args[1:3]] == ["k", "v"]


def test_matches_the_interpreter_without_copy_kernels(ind) -> None:
    """The repeats were two copy kernels; now only the output's kernel is left, and the
    values are the repeated attention's (the interpreter runs the graph as written)."""
    compiled = ind.check(_attention(_repeat_kv, _repeat_kv), "cpp", rtol=1e-5, atol=1e-5)
    assert len(compiled.kernels) == 1


def test_tiled_heads_or_different_groups_are_left_alone() -> None:
    """A tiling (head ``i`` from ``i % h``) is another attention; key and value repeated
    by different factors cannot be passed unrepeated."""
    tiled = _attention(_tile_kv, _tile_kv)
    assert grouped_query_attention(tiled) is tiled
    mixed = _attention(_repeat_kv, _repeat_kv, value_heads=3)
    assert grouped_query_attention(mixed) is mixed
