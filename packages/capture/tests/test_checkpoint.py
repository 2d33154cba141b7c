"""``torch.utils.checkpoint.checkpoint`` inside a captured function: the non-reentrant
form is inlined with its nodes tagged ``recompute``; the reentrant form and a
``context_fn`` are graph breaks that say why."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

from torchstrata.capture import capture
from torchstrata.core import RECOMPUTE


class Block(nn.Module):
    def __init__(self, use_reentrant: bool | None = False, **options) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 4)
        self.use_reentrant = use_reentrant
        self.options = options

    def mlp(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x))) * scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x)
        kwargs = dict(self.options)
        if self.use_reentrant is not None:
            kwargs["use_reentrant"] = self.use_reentrant
        return x + checkpoint(self.mlp, h, **kwargs).relu()


def test_checkpointed_nodes_are_tagged_recompute(captured, against_eager):
    block = Block(scale=0.5, preserve_rng_state=False, determinism_check="none")
    x = torch.randn(2, 4)
    result, graph = captured(block, x)
    tagged = [node.op.name for node in graph.nodes if RECOMPUTE in node.tags]
    untagged = [node.op.name for node in graph.nodes if RECOMPUTE not in node.tags]
    assert tagged == [
        "torch.nn.functional.linear",
        "torch.nn.functional.gelu",
        "torch.nn.functional.linear",
        "operator.mul",  # the function's keyword argument reached it
    ]
    assert "torch.tanh" in untagged and "torch.Tensor.relu" in untagged
    against_eager(result, block, torch.randn(2, 4))


@pytest.mark.parametrize(
    ("block", "reason"),
    [
        (Block(use_reentrant=True), "use_reentrant=True is not captured"),
        (Block(use_reentrant=None), "use_reentrant=None is not captured"),
        (
            Block(
                context_fn=functools.partial(
                    create_selective_checkpoint_contexts, [torch.ops.aten.mm.default]
                )
            ),
            "context_fn (selective activation checkpointing) is not captured",
        ),
    ],
    ids=["reentrant", "reentrant-by-default", "context_fn"],
)
def test_other_checkpoints_break_with_their_reason(block, reason):
    result = capture(block, (torch.randn(2, 4),), {})
    assert len(result.graph_breaks) == 1
    assert reason in result.graph_breaks[0].reason
