"""Capture time of a 20-layer transformer forward (d=256, 4 heads).

Run: ``python bench/capture_time.py [--layers 20] [--manual]``.
Prints three figures for ``capture(model, (x,), {})``:

- the first capture in a fresh process, which includes torch's own one-time work (its
  meta kernels import ``torch._dynamo`` lazily, several seconds on this machine);
- the first capture of this model after a warm-up capture of a small, different model
  (torch warmed up, capture's meta-inference cache cold for these shapes);
- the median of repeated captures (meta results cached across captures).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from torchstrata.capture import capture


class Attention(nn.Module):
    """Multi-head self-attention, with SDPA or written out by hand."""

    def __init__(self, dim: int, heads: int, manual: bool) -> None:
        super().__init__()
        self.heads, self.manual = heads, manual
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.manual:
            scores = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
            y = scores.softmax(dim=-1) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-norm transformer block."""

    def __init__(self, dim: int, heads: int, manual: bool) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, manual)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    """``layers`` blocks in a ModuleList."""

    def __init__(self, layers: int, dim: int, heads: int, manual: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim, heads, manual) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


def main() -> None:
    """Print the capture time."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layers", type=int, default=20)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--manual", action="store_true", help="attention written by hand")
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    model = Transformer(options.layers, options.dim, options.heads, options.manual).eval()
    x = torch.randn(2, 64, options.dim)
    times = []
    start = time.perf_counter()
    capture(Transformer(1, 24, 2, options.manual).eval(), (torch.randn(1, 3, 24),), {})
    cold = time.perf_counter() - start
    for _ in range(options.repeat + 1):
        start = time.perf_counter()
        result = capture(model, (x,), {})
        times.append(time.perf_counter() - start)
    assert not result.graph_breaks, result.graph_breaks
    (graph,) = result.graphs
    kind = "manual attention" if options.manual else "scaled_dot_product_attention"
    print(
        f"capture of a {options.layers}-layer transformer (d={options.dim}, {options.heads} heads,"
        f" {kind}): {len(graph.nodes)} nodes, {len(graph.inputs)} inputs, "
        f"{len(result.guards)} guards"
    )
    print(f"fresh process, first capture (small warm-up model): {cold:.3f} s")
    print(f"first capture of this model after the warm-up: {times[0]:.3f} s")
    print(f"median of the next {options.repeat}: {statistics.median(times[1:]):.3f} s")


if __name__ == "__main__":
    main()
