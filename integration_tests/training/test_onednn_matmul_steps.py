"""A GPT-2-style training step (fused qkv, causal attention, MLP, tied embedding and head)
with every float32 CPU matmul the launcher may send to oneDNN sent there, and with none
(decision 0375). The launcher's choice is timed per shape, so a test on its default would
cover whichever library won on the machine: both are forced here. The loss and every
gradient equal eager's, over two steps, with no fallback to eager."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchstrata.runtime as rt
from torchstrata.core import CompileOptions, InductorOptions
from torchstrata.inductor.launch.cpu_matmuls import onednn_available

from .models import GPTBlock

#: the bench's CPU M3 sizes (width 128, vocab 50304, batch 4 x 64 tokens): a smaller model
#: missed a launcher bug (a oneDNN operand view named but never made) that these showed
VOCAB = 50304


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = VOCAB, dim: int = 128, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(64, dim) * 0.02)
        self.blocks = nn.ModuleList(GPTBlock(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _step(model: nn.Module, fn, idx, targets):
    for p in model.parameters():
        p.grad = None
    loss = fn(idx, targets)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN")
@pytest.mark.parametrize("onednn", [True, False], ids=["onednn", "aten"])
def test_a_gpt_training_step_with_matmuls_by_each_library_matches_eager(onednn):
    torch.manual_seed(0)
    model = TinyGPT()
    options = CompileOptions(inductor=InductorOptions(onednn_matmuls=onednn))
    compiled = rt.compile(model, codegen="cpp", options=options)
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for _ in range(2):
            idx = torch.randint(0, VOCAB, (4, 64))
            targets = torch.randint(0, VOCAB, (4, 64))
            want_loss, want = _step(model, model, idx, targets)
            loss, got = _step(model, compiled, idx, targets)
            torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-5)
            for name in want:
                torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5)
