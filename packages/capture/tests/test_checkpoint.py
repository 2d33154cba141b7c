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
from torchstrata.core import RECOMPUTE, recompute_region, recompute_regions


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
    assert {recompute_regions(node) for node in graph.nodes if node.tags} == {
        frozenset({recompute_region(1)})
    }
    against_eager(result, block, torch.randn(2, 4))


def test_each_checkpoint_call_is_a_region_of_its_own(captured, against_eager):
    blocks = nn.ModuleList(Block() for _ in range(2))

    def chain(x):
        for block in blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return x

    result, graph = captured(chain, torch.randn(2, 4))
    regions = [recompute_regions(node) for node in graph.nodes]
    assert all(RECOMPUTE in node.tags for node in graph.nodes)
    # the outer checkpoints 1 and 3, each block's inner MLP checkpoint 2 and 4
    assert set(regions) == {
        frozenset({recompute_region(1)}),
        frozenset({recompute_region(1), recompute_region(2)}),
        frozenset({recompute_region(3)}),
        frozenset({recompute_region(3), recompute_region(4)}),
    }
    against_eager(result, chain, torch.randn(2, 4))


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
