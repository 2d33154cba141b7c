"""A Llama-style decoder layer and a small decoder with a static KV cache.

Written like HF/gpt-fast code: composed RMSNorm with fp32 upcast, chunk/cat RoPE,
grouped-query attention by ``repeat_kv`` and ``scaled_dot_product_attention``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bench.workloads.kernels import rope


@dataclass(frozen=True)
class LlamaConfig:
    """Sizes of a Llama-style model. ``max_seq`` is the RoPE table and KV cache length."""

    dim: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    max_seq: int
    n_layers: int = 1
    vocab: int = 32000

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.dim // self.n_heads


class RMSNorm(nn.Module):
    """HF-style RMSNorm: statistics in fp32, result cast back, then scaled."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x [..., dim]``."""
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rope_tables(length: int, head_dim: int, theta: float = 10000.0) -> tuple[torch.Tensor, ...]:
    """cos and sin tables ``[length, head_dim]`` in fp32 (HF layout: halves repeated)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(length).float(), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Expand ``[B, Hkv, T, D]`` to ``[B, Hkv * n_rep, T, D]`` for grouped-query attention."""
    b, h, t, d = x.shape
    return x[:, :, None].expand(b, h, n_rep, t, d).reshape(b, h * n_rep, t, d)


class FeedForward(nn.Module):
    """SwiGLU MLP: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the MLP to ``x [..., dim]``."""
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Attention(nn.Module):
    """Causal grouped-query self-attention with RoPE, optionally over a static KV cache."""

    k_cache: torch.Tensor
    v_cache: torch.Tensor

    def __init__(self, cfg: LlamaConfig, cache_batch: int | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * hd, bias=False)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * hd, cfg.dim, bias=False)
        if cache_batch is not None:
            shape = (cache_batch, cfg.n_kv_heads, cfg.max_seq, hd)
            self.register_buffer("k_cache", torch.randn(shape) * 0.5)
            self.register_buffer("v_cache", torch.randn(shape))

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        pos: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``x [B, T, dim]``; with ``pos``/``mask``, write k/v at ``pos`` and attend the cache."""
        b, t, _ = x.shape
        hd, cfg = self.cfg.head_dim, self.cfg
        q = self.q_proj(x).view(b, t, cfg.n_heads, hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, cfg.n_kv_heads, hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, cfg.n_kv_heads, hd).transpose(1, 2)
        q, k = rope(q, k, cos.to(x.dtype), sin.to(x.dtype))
        if pos is not None:
            self.k_cache.index_copy_(2, pos, k)
            self.v_cache.index_copy_(2, pos, v)
            k, v = self.k_cache, self.v_cache
        n_rep = cfg.n_heads // cfg.n_kv_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, cfg.dim))


class DecoderLayer(nn.Module):
    """Pre-norm Llama block: ``h = x + attn(norm(x))``, ``out = h + mlp(norm(h))``."""

    def __init__(self, cfg: LlamaConfig, cache_batch: int | None = None) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim)
        self.attn = Attention(cfg, cache_batch)
        self.mlp_norm = RMSNorm(cfg.dim)
        self.mlp = FeedForward(cfg.dim, cfg.ffn_dim)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        pos: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Apply the block to ``x [B, T, dim]``."""
        h = x + self.attn(self.attn_norm(x), cos, sin, pos, mask)
        return h + self.mlp(self.mlp_norm(h))


class LlamaLayer(nn.Module):
    """One decoder layer owning its RoPE tables: the M2 workload, ``x [B, T, dim]`` in."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.layer = DecoderLayer(cfg)
        cos, sin = rope_tables(cfg.max_seq, cfg.head_dim)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the layer over the whole sequence (causal)."""
        t = x.shape[1]
        return self.layer(x, self.cos[:t], self.sin[:t])


class LlamaDecoder(nn.Module):
    """Embedding, ``n_layers`` blocks with static KV caches, final norm and LM head (M5)."""

    cos: torch.Tensor
    sin: torch.Tensor
    positions: torch.Tensor

    def __init__(self, cfg: LlamaConfig, batch: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = nn.ModuleList(DecoderLayer(cfg, batch) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        cos, sin = rope_tables(cfg.max_seq, cfg.head_dim)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("positions", torch.arange(cfg.max_seq), persistent=False)

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """One decode step: ``tokens [B, 1]`` at position ``pos [1]`` -> logits ``[B, 1, V]``."""
        x = self.embed(tokens)
        cos, sin = self.cos[pos], self.sin[pos]
        mask = (self.positions <= pos).view(1, 1, 1, -1)
        for layer in self.layers:
            x = layer(x, cos, sin, pos, mask)
        return self.lm_head(self.norm(x))
