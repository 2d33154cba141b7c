"""One tensor reached through two sources is one graph input (``tracer._lift_tensor``): a
tied embedding and head (``head.weight = embed.weight``) use one weight, so autograd sums
its two gradient halves in the graph; a guard checks that the sources still alias."""

from __future__ import annotations

import torch
from torch import nn

from torchstrata.capture import capture


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 4)
        self.head = nn.Linear(4, 16, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, idx):
        return self.head(torch.tanh(self.embed(idx))).sum()


def test_a_tied_weight_is_one_input(captured, against_eager):
    model = Tied()
    idx = torch.tensor([[1, 5, 5, 0]])
    result, graph = captured(model.forward, idx)
    assert [node.name for node in graph.inputs] == ["idx", "self_embed_weight"]
    uses = [node for node in graph.nodes if graph.inputs[1] in node.input_nodes()]
    assert len(uses) == 2  # the embedding and the head read the same input
    aliases = [guard for guard in result.guards if " is (" in guard.source]
    assert len(aliases) == 1 and "head" in aliases[0].source and "embed" in aliases[0].source
    against_eager(result, model.forward, idx)


def test_untying_fails_the_alias_guard(capture_only):
    model = Tied()
    run = capture_only(model)
    idx = torch.tensor([[2, 3]])
    torch.testing.assert_close(run(idx), model(idx))
    model.head.weight = nn.Parameter(torch.randn(16, 4))  # untied: two inputs now
    torch.testing.assert_close(run(idx), model(idx))
    assert run.captures == 2
    (graph,) = run.entries[1].graphs
    assert len(graph.inputs) == 3


def test_the_same_tensor_passed_twice_is_one_input(captured, against_eager):
    def f(a, b):
        return a * 2 + b

    x = torch.randn(3)
    result, graph = captured(f, x, x)
    assert len(graph.inputs) == 1
    against_eager(result, f, x, x)
    assert capture(f, (x, x.clone()), {}).graphs[0].inputs[1].name == "b"
