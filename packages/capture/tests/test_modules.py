"""nn.Module forwards: submodules inlined, parameters and buffers lifted to graph inputs."""

from __future__ import annotations

import torch
from torch import nn

from torchstrata.capture import capture
from torchstrata.core import GuardKind, TensorMeta, interpret


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x):
        return torch.softmax(self.fc2(self.act(self.fc1(x))), dim=-1)


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
        self.norm = nn.LayerNorm(8)
        self.head = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Dropout(0.1))
        self.register_buffer("shift", torch.randn(8))
        self.scale = 2.0

    def forward(self, x, mask=None):
        for layer in self.layers:
            x = x + layer(x) * self.scale
        if mask is not None:
            x = x * mask
        return self.head(self.norm(x)) + self.shift


class Scaled(Stack):
    def forward(self, x):
        return super().forward(x) * 2


def test_mlp_lifts_parameters_as_inputs(captured, against_eager):
    model = MLP()
    result, graph = captured(model.forward, torch.randn(4, 16))
    assert [op.name for op in graph.ops()] == [
        "torch.nn.functional.linear", "torch.nn.functional.gelu",
        "torch.nn.functional.linear", "torch.softmax",
    ]  # fmt: skip
    assert [node.name for node in graph.inputs] == [
        "x", "self_fc1_weight", "self_fc1_bias", "self_fc2_weight", "self_fc2_bias",
    ]  # fmt: skip
    assert graph.inputs[1].meta.requires_grad
    assert result.program.input_sources[1] == "L['self'].fc1.weight"
    against_eager(result, model.forward, torch.randn(4, 16))


def test_mlp_guards():
    model = MLP()
    result = capture(model.forward, (torch.randn(4, 16),), {})
    guards = {(guard.kind, guard.source): guard.expected for guard in result.guards}
    assert guards[(GuardKind.ID_MATCH, "L['self']")] == id(model)
    assert guards[(GuardKind.TENSOR_MATCH, "L['self'].fc2.bias")] == TensorMeta.from_tensor(
        model.fc2.bias
    )
    assert guards[(GuardKind.CONSTANT_MATCH, "L['self'].act.approximate")] == "none"


def test_program_reads_parameters_at_call_time(captured):
    model = MLP()
    result, graph = captured(model, torch.randn(4, 16))  # a module means its forward
    with torch.no_grad():
        model.fc2.bias.add_(1.0)
    x = torch.randn(4, 16)
    out = result.program([lambda *inputs: interpret(graph, *inputs)], (x,), {})
    torch.testing.assert_close(out, model(x))


def test_module_list_sequential_buffers_and_optional_argument(captured, against_eager):
    model = Stack().eval()
    result, graph = captured(model.forward, torch.randn(2, 8))
    assert "self_shift" in [node.name for node in graph.inputs]
    guards = {(guard.kind, guard.source): guard.expected for guard in result.guards}
    assert guards[(GuardKind.CONSTANT_MATCH, "L['self'].scale")] == 2.0
    assert guards[(GuardKind.CONSTANT_MATCH, "L['self'].head._modules['2'].training")] is False
    assert guards[(GuardKind.CONSTANT_MATCH, "tuple(L['self'].head._modules)")] == ("0", "1", "2")
    against_eager(result, model.forward, torch.randn(2, 8))
    result, _ = captured(model.forward, torch.randn(2, 8), torch.ones(8))
    against_eager(result, model.forward, torch.randn(2, 8), torch.rand(8))


def test_super_forward(captured, against_eager):
    model = Scaled().eval()
    result, _ = captured(model.forward, torch.randn(2, 8))
    against_eager(result, model.forward, torch.randn(2, 8))


def test_forward_hooks_break_the_graph(against_eager):
    model = MLP()
    model.fc1.register_forward_hook(lambda module, args, output: output * 2)
    result = capture(model.forward, (torch.randn(4, 16),), {})
    assert "hooks on Linear" in result.graph_breaks[0].reason
    against_eager(result, model.forward, torch.randn(4, 16))
