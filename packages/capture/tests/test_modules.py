"""nn.Module forwards: submodules inlined, parameters and buffers lifted to graph inputs."""

from __future__ import annotations

import functools

import torch
from torch import nn

from torchstrata.capture import capture, frame_locals, guard_failure
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
    assert result.program.input_sources[1] == "L['self']._modules['fc1']._parameters['weight']"
    against_eager(result, model.forward, torch.randn(4, 16))


def test_mlp_guards():
    model = MLP()
    result = capture(model.forward, (torch.randn(4, 16),), {})
    guards = {(guard.kind, guard.source): guard.expected for guard in result.guards}
    assert guards[(GuardKind.ID_MATCH, "L['self']")] == id(model)
    assert guards[
        (GuardKind.TENSOR_MATCH, "L['self']._modules['fc2']._parameters['bias']")
    ] == TensorMeta.from_tensor(model.fc2.bias)
    assert guards[(GuardKind.CONSTANT_MATCH, "L['self']._modules['act'].approximate")] == "none"


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
    assert (
        guards[(GuardKind.CONSTANT_MATCH, "L['self']._modules['head']._modules['2'].training")]
        is False
    )
    assert guards[(GuardKind.CONSTANT_MATCH, "tuple(L['self']._modules['head']._modules)")] == (
        "0",
        "1",
        "2",
    )
    against_eager(result, model.forward, torch.randn(2, 8))
    result, _ = captured(model.forward, torch.randn(2, 8), torch.ones(8))
    against_eager(result, model.forward, torch.randn(2, 8), torch.rand(8))


def test_super_forward(captured, against_eager):
    model = Scaled().eval()
    result, _ = captured(model.forward, torch.randn(2, 8))
    against_eager(result, model.forward, torch.randn(2, 8))


def test_forward_hooks_are_inlined(against_eager):
    model = MLP()
    model.fc1.register_forward_hook(lambda module, args, output: output * 2)
    model.fc2.register_forward_pre_hook(lambda module, args: (args[0] + 1,))
    result = capture(model.forward, (torch.randn(4, 16),), {})
    assert result.graph_breaks == ()
    against_eager(result, model.forward, torch.randn(4, 16))


def test_full_backward_hooks_are_traced_global_ones_break(against_eager):
    model = MLP()
    model.fc1.register_full_backward_hook(lambda module, grad_in, grad_out: None)
    result = capture(model.forward, (torch.randn(4, 16),), {})
    assert result.graph_breaks == ()
    against_eager(result, model.forward, torch.randn(4, 16))
    handle = torch.nn.modules.module.register_module_full_backward_hook(lambda *args: None)
    try:
        result = capture(model.forward, (torch.randn(4, 16),), {})
    finally:
        handle.remove()
    assert "global module backward hooks (calling Linear)" in result.graph_breaks[0].reason


class _Lookup(nn.Module):
    """Finds ``weight`` through its own ``__getattr__``."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def __getattr__(self, name: str):
        if name == "weight":
            return self.inner.weight * 2
        return super().__getattr__(name)

    def forward(self, x):
        return x @ self.weight


class _ClassScale(nn.Module):
    scale = 3.0  # a class attribute: found before the module's dicts are looked at

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) * self.scale


def _sources(model, x):
    result = capture(model.forward, (x,), {})
    return {guard.source for guard in result.guards}


def test_members_that_nn_module_getattr_finds_are_read_from_its_dicts():
    sources = _sources(_ClassScale(), torch.randn(2, 4))
    assert "L['self']._modules['fc']._parameters['bias']" in sources
    assert "L['self'].scale" in sources  # a class attribute keeps its plain source


def test_a_module_with_its_own_getattr_keeps_plain_sources(captured, against_eager):
    model = _Lookup()
    sources = _sources(model, torch.randn(2, 4))
    assert "L['self'].weight" in sources  # read through the module's own __getattr__
    assert not any("_modules" in source or "_parameters" in source for source in sources)
    result, _ = captured(model.forward, torch.randn(2, 4))
    against_eager(result, model.forward, torch.randn(2, 4))


def test_a_member_shadowed_in_the_instance_dict_keeps_its_plain_source(captured, against_eager):
    model = MLP()
    shadow = torch.randn(32, 16)
    object.__setattr__(model.fc1, "weight", shadow)  # eager reads this one now
    assert "weight" in vars(model.fc1) and "weight" in model.fc1._parameters
    result, _ = captured(model.forward, torch.randn(4, 16))
    assert "L['self']._modules['fc1'].weight" in result.program.input_sources
    against_eager(result, model.forward, torch.randn(4, 16))


class GrowingCache(nn.Module):
    """Replaces its buffer with ``register_buffer`` during forward, then reads it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.arange(5.0))

    def forward(self, x):
        if x.shape[0] > self.table.shape[0]:
            self.register_buffer("table", torch.arange(float(x.shape[0])) * 2)
        return x + self.table[: x.shape[0]]


def test_a_buffer_replaced_by_register_buffer_is_read_back_from_the_trace():
    module = GrowingCache()
    result = capture(module, (torch.ones(7),), {})
    assert result.graph_breaks == ()
    assert module.table.shape == (5,)  # capture changed nothing yet
    runners = [functools.partial(interpret, graph) for graph in result.graphs]
    out = result.program(runners, (torch.ones(7),), {})
    torch.testing.assert_close(out, torch.ones(7) + torch.arange(7.0) * 2)
    assert module.table.shape == (7,)  # the replacement reached the real module


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(self.embed(ids)), self.head.weight is self.embed.weight


def test_a_tied_weight_is_one_graph_input_seen_as_one_object(captured, against_eager):
    model = Tied()
    ids = torch.tensor([1, 2, 3])
    result, graph = captured(model, ids)
    assert len(graph.inputs) == 2  # ids and the one weight
    _, same = against_eager(result, model, ids)
    assert same is True
    untied = Tied()
    untied.head.weight = nn.Parameter(untied.embed.weight.detach().clone())
    assert any(g.description == "alias" for g in result.guards)
    frame = frame_locals(untied.forward, (ids,), {})
    assert guard_failure(result.guards, frame, {}) is not None  # untied: a recompile


def test_a_constant_tuple_concatenated_with_tensors():
    def fn(x):
        states = ()
        for i in range(3):
            states = states + (x * i,)  # noqa: RUF005 - the form under test
        return states, [] + [x] if x.shape[0] else None  # noqa: RUF005

    result = capture(fn, (torch.ones(2),), {})
    assert result.graph_breaks == ()


def test_a_list_plus_a_tuple_still_raises_as_eager():
    def fn(x):
        try:
            return [x] + (x,)
        except TypeError:
            return x

    result = capture(fn, (torch.ones(2),), {})
    assert result.graph_breaks  # eager raises the TypeError when the break runs it


def test_a_torch_loss_module_built_in_forward_is_made_at_capture_time(against_eager):
    def fn(logits, labels):
        loss_fct = nn.CrossEntropyLoss(ignore_index=logits.size(1))
        return loss_fct(logits, labels.clamp(0, logits.size(1)))

    args = (torch.randn(4, 3), torch.tensor([0, 2, 5, 1]))
    result = capture(fn, args, {})
    assert result.graph_breaks == ()
    against_eager(result, fn, *args)


def test_a_torch_loss_module_holding_class_weights_is_not_built_at_capture_time():
    def fn(logits, labels, weight):
        return nn.CrossEntropyLoss(weight=weight)(logits, labels)

    result = capture(fn, (torch.randn(4, 3), torch.tensor([0, 2, 1, 1]), torch.ones(3)), {})
    assert result.graph_breaks  # a tensor argument: not folded


def test_freezing_a_parameter_is_set_after_the_graph_and_read_as_detached():
    model = nn.Linear(2, 2)

    def fn(model, x):
        model.weight.requires_grad_(False)
        return model(x), model.weight.requires_grad

    result = capture(fn, (model, torch.ones(2)), {})
    assert result.graph_breaks == ()
    assert model.weight.requires_grad is True  # capture changed nothing yet
    runners = [functools.partial(interpret, graph) for graph in result.graphs]
    out, flag = result.program(runners, (model, torch.ones(2)), {})
    assert flag is False and model.weight.requires_grad is False
    out.sum().backward()
    assert model.weight.grad is None and model.bias.grad is not None


def test_requires_grad_true_on_a_frozen_input_runs_eagerly():
    def fn(x):
        x.requires_grad_(True)
        return x * 2

    result = capture(fn, (torch.ones(2),), {})
    assert result.graph_breaks
    assert "requires_grad_" in result.graph_breaks[0].reason


def test_parameter_data_written_under_no_grad_reaches_the_parameter():
    model = nn.Linear(3, 3)
    expected = model.weight.detach().clone() * 2 + 1

    def fn(model, delta):
        with torch.no_grad():
            model.weight.data += delta
            model.weight.data.mul_(2)
        return model.weight.detach().sum(), model.weight.requires_grad

    result = capture(fn, (model, torch.full((3, 3), 0.5)), {})
    assert result.graph_breaks == ()
    runners = [functools.partial(interpret, graph) for graph in result.graphs]
    total, flag = result.program(runners, (model, torch.full((3, 3), 0.5)), {})
    torch.testing.assert_close(model.weight.detach(), expected)
    torch.testing.assert_close(total, expected.sum())
    assert flag is True and isinstance(model.weight, nn.Parameter)


def test_parameter_data_outside_no_grad_stays_a_graph_break():
    def fn(model):
        return model.weight.data * 2

    result = capture(fn, (nn.Linear(3, 3),), {})
    assert result.graph_breaks and "Tensor.data" in result.graph_breaks[0].reason


def test_requires_grad_false_on_a_detached_tensor_changes_nothing(against_eager):
    def fn(w, x):
        return x @ w.detach().requires_grad_(False).T

    args = (torch.randn(3, 3, requires_grad=True), torch.randn(2, 3))
    result = capture(fn, args, {})
    assert result.graph_breaks == ()
    against_eager(result, fn, *args)
