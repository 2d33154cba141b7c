"""A tiny transformer language model for the distributed tests (small enough that 10
training steps in two gloo processes take well under a second eagerly)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

VOCAB = 32
DIM = 16
HEADS = 2
SEQ = 8


class Block(nn.Module):
    """Pre-norm attention and MLP, optionally with the MLP under activation checkpointing
    inside ``forward``."""

    def __init__(self, dim: int = DIM, heads: int = HEADS, checkpoint_mlp: bool = False) -> None:
        super().__init__()
        self.heads = heads
        self.checkpoint_mlp = checkpoint_mlp
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(dim, dim=-1)
        q = q.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2)
        k = k.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2)
        v = v.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(batch, seq, dim))
        if self.checkpoint_mlp:
            return x + checkpoint(self.mlp, self.ln2(x), use_reentrant=False)
        return x + self.mlp(self.ln2(x))

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        """The feed-forward half."""
        return self.fc2(F.gelu(self.fc1(x)))


class TinyLM(nn.Module):
    """Embedding, ``layers`` blocks, final norm and head; returns the logits. With
    ``unused=True`` it holds a layer that ``forward`` reads only while ``read_unused`` is
    set (for DDP's ``find_unused_parameters``: unused on some steps, used on others);
    with ``detached=True`` a layer whose weight ``forward`` reads through ``detach()``
    only (a parameter read without a gradient) and whose bias it never reads."""

    def __init__(
        self,
        layers: int = 2,
        unused: bool = False,
        checkpoint_mlp: bool = False,
        detached: bool = False,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block(checkpoint_mlp=checkpoint_mlp) for _ in range(layers))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.unused = nn.Linear(DIM, DIM) if unused else None
        self.read_unused = False
        self.frozen = nn.Linear(DIM, DIM) if detached else None

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        if self.unused is not None and self.read_unused:
            x = x + self.unused(x)
        if self.frozen is not None:
            x = x + F.linear(x, self.frozen.weight.detach())
        return self.head(self.norm(x))


def batch(rank: int, step: int, size: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and next-token targets, different on every rank and step."""
    generator = torch.Generator().manual_seed(1000 * rank + step)
    tokens = torch.randint(0, VOCAB, (size, SEQ + 1), generator=generator)
    return tokens[:, :-1], tokens[:, 1:]


def loss_of(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy."""
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
