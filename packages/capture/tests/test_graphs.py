"""Graphs captured from straight-line tensor code, compared with eager on fresh inputs."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from torchstrata.capture import capture
from torchstrata.core import GuardKind, OpKind, OpRef, TensorMeta

SCALE = 0.5


def _ops(graph):
    return [op.name for op in graph.ops()]


def test_demo_lambda_is_three_nodes(captured, against_eager):
    fn = lambda x, b: torch.softmax(F.gelu(x + b), -1)  # noqa: E731
    result, graph = captured(fn, torch.randn(64, 128), torch.randn(128))
    assert _ops(graph) == ["operator.add", "torch.nn.functional.gelu", "torch.softmax"]
    assert [node.name for node in graph.inputs] == ["x", "b"]
    assert graph.outputs[0].meta == TensorMeta((64, 128), torch.float32)
    against_eager(result, fn, torch.randn(64, 128), torch.randn(128))


def test_demo_guards():
    fn = lambda x, b: torch.softmax(F.gelu(x + b), -1)  # noqa: E731
    x = torch.randn(64, 128).t()
    result = capture(fn, (x, torch.randn(64)), {})
    guards = {(guard.kind, guard.source): guard.expected for guard in result.guards}
    assert guards[(GuardKind.TENSOR_MATCH, "L['x']")] == TensorMeta.from_tensor(x)
    assert guards[(GuardKind.TENSOR_MATCH, "L['x']")].strides == (1, 128)
    assert guards[(GuardKind.ID_MATCH, "G['torch']")] == id(torch)
    assert guards[(GuardKind.ID_MATCH, "G['F']")] == id(F)


def test_tensor_methods_operators_and_shape_arithmetic(captured, against_eager):
    def fn(x, y):
        n, d = x.shape
        z = x.view(n * d // 2, -1).t() @ y.view(-1, 4)[: n * d // 2]
        w = -(z**2) + 1.0 / math.sqrt(d) - SCALE
        v = (w * 2 - 1) / (x.size(1) + x.ndim) % 3
        return v.softmax(-1), w >= 0, x.dtype, x.size(), abs(x).sum(dim=0, keepdim=True)

    result, graph = captured(fn, torch.randn(4, 6), torch.randn(48))
    ops = _ops(graph)
    assert "torch.Tensor.view" in ops and "operator.matmul" in ops and "operator.neg" in ops
    assert "torch.Tensor.softmax" in ops and "operator.ge" in ops
    assert all(not name.startswith("math.") for name in ops)  # constants were folded
    against_eager(result, fn, torch.randn(4, 6), torch.randn(48))


def test_tuple_list_and_dict_returns(captured, against_eager):
    def fn(x, scale=2):
        y = torch.relu(x) * scale
        return {"y": y, "parts": [y, x - 1], "meta": (x.ndim, "label", None)}, (y, y)

    result, graph = captured(fn, torch.randn(3, 5))
    assert len(graph.outputs) == 2  # y is returned three times but output once
    out = against_eager(result, fn, torch.randn(3, 5))
    assert out[1][0] is out[1][1]


def test_keyword_arguments_defaults_and_constants(captured, against_eager):
    def fn(x, *, dim=-1, eps=1e-5):
        return F.layer_norm(x, (x.shape[dim],), eps=eps), torch.sum(x, dim=dim, keepdim=True)

    result, graph = captured(fn, torch.randn(2, 8), eps=1e-3)
    assert graph.nodes[0].kwargs == {"eps": 1e-3}
    guards = {(guard.kind, guard.source): guard.expected for guard in result.guards}
    assert guards[(GuardKind.CONSTANT_MATCH, "L['eps']")] == 1e-3
    against_eager(result, fn, torch.randn(2, 8), eps=1e-3)


def test_indexing_lowers_to_view_ops(captured, against_eager):
    def fn(x, idx):
        return x[1], x[:, 1:3], x[..., None, ::2], x[-1, :-1], x[idx], x.T, x.mT

    idx = torch.tensor([0, 2])
    result, graph = captured(fn, torch.randn(4, 6), idx)
    ops = set(_ops(graph))
    assert {"torch.select", "torch.narrow", "torch.unsqueeze", "operator.getitem"} <= ops
    against_eager(result, fn, torch.randn(4, 6), idx)


def test_inlined_helpers_comprehensions_loops_and_closures(captured, against_eager):
    weight = torch.randn(6, 6)

    def helper(t, k=2):
        return t * k

    def fn(x, *extra, **options):
        parts = [helper(x, i) for i in range(3)]
        for i, part in enumerate(parts):
            x = x + part / (i + 1)
        first, *rest = extra
        values, indices = torch.max(x, dim=1)
        named = torch.max(x, 1)
        return sum(parts) @ weight, first + rest[-1] * options["s"], values + named.values, indices

    args = (torch.randn(4, 6), torch.randn(6), torch.randn(6))
    result, _ = captured(fn, *args, s=3)
    fresh = (torch.randn(4, 6), torch.randn(6), torch.randn(6))
    against_eager(result, fn, *fresh, s=3)


def test_in_place_update_of_an_intermediate(captured, against_eager):
    def fn(x):
        y = x * 2
        y += 1
        y.mul_(3)
        return y

    result, graph = captured(fn, torch.randn(5))
    assert _ops(graph) == ["operator.mul", "operator.iadd", "torch.Tensor.mul_"]
    assert graph.outputs[0] is graph.nodes[-1]
    against_eager(result, fn, torch.randn(5))


def test_generator_expressions_and_global_state(captured, against_eager):
    def fn(x, y):
        assert all(t.ndim == 2 for t in (x, y))
        new_shape = tuple(size * 2 for size in x.shape)
        if torch.is_grad_enabled():
            y = y + 1
        return x.repeat(2, 2).view(new_shape) + y.sum()

    result, _ = captured(fn, torch.randn(2, 3), torch.randn(2, 3))
    guards = {guard.source: guard.expected for guard in result.guards}
    assert guards["torch.is_grad_enabled()"] is True
    against_eager(result, fn, torch.randn(2, 3), torch.randn(2, 3))


def test_import_inside_function(captured, against_eager):
    def fn(x):
        import torch.nn.functional as functional
        from torch import tanh

        return tanh(functional.silu(x))

    result, graph = captured(fn, torch.randn(3))
    assert [op.name for op in graph.ops()] == ["torch.nn.functional.silu", "torch.tanh"]
    against_eager(result, fn, torch.randn(3))


def test_factories_and_tensor_method_op_names(captured, against_eager):
    def fn(x):
        return x.to(torch.float64) + torch.ones(x.shape[-1], dtype=torch.float64), x.float().exp()

    result, graph = captured(fn, torch.randn(2, 3))
    assert graph.nodes[0].op == OpRef(OpKind.TORCH, "torch.Tensor.to")
    against_eager(result, fn, torch.randn(2, 3))
