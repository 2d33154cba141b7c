"""nanoGPT-style GPT-2 (random init) whose forward returns the training loss (M3)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPTConfig:
    """GPT-2 sizes; GPT-2 small is 12 layers, 12 heads, width 768, vocab 50304."""

    n_layers: int
    n_heads: int
    dim: int
    vocab: int
    block: int


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention with a fused qkv projection."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.c_attn = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.c_proj = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, T, C]`` -> ``[B, T, C]``."""
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """Pre-LN transformer block with a GELU MLP."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.dim)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.dim)
        self.c_fc = nn.Linear(cfg.dim, 4 * cfg.dim)
        self.c_proj = nn.Linear(4 * cfg.dim, cfg.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the block to ``x [B, T, C]``."""
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    """GPT-2 with tied embedding/LM-head weights; ``forward(idx, targets)`` returns the loss.

    ``amp_dtype`` enables autocast inside forward (bf16 on the GPU); the fp64
    reference run sets it to ``None``.
    """

    def __init__(self, cfg: GPTConfig, amp_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.amp_dtype = amp_dtype
        self.wte = nn.Embedding(cfg.vocab, cfg.dim)
        self.wpe = nn.Embedding(cfg.block, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.dim)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy of ``idx [B, T]`` against ``targets [B, T]``."""
        enabled = self.amp_dtype is not None
        with torch.autocast(idx.device.type, dtype=self.amp_dtype, enabled=enabled):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.blocks:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))
