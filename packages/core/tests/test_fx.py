"""FX interop both ways."""

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

from torchstrata.core import Level, from_fx, interpret, to_fx, verify


def _fn(x, b):
    return torch.softmax(torch.nn.functional.gelu(x + b), -1)


def test_from_fx_aten_graph_from_make_fx():
    x, b = torch.randn(4, 8), torch.randn(8)
    gm = make_fx(_fn)(x, b)
    graph = from_fx(gm)
    assert graph.level is Level.ATEN
    verify(graph)
    torch.testing.assert_close(interpret(graph, x, b)[0], _fn(x, b))


def test_from_fx_torch_level_symbolic_trace_and_back():
    gm = torch.fx.symbolic_trace(_fn)
    x, b = torch.randn(4, 8), torch.randn(8)
    graph = from_fx(gm, [x, b])
    assert graph.level is Level.TORCH
    verify(graph)
    exported = to_fx(graph)
    torch.testing.assert_close(exported(x, b)[0], _fn(x, b))


def _subscripts(x, i):
    return x[1:, None, ::2] * 2, x[-1, ..., 1:2], x[..., 0, None], x[:][i]


def test_from_fx_lowers_tensor_subscripts_to_view_ops():
    import pytest

    from torchstrata.core import FxImportError, parse

    gm = torch.fx.symbolic_trace(_subscripts)
    x, i = torch.randn(5, 6), torch.tensor([0, 2])
    graph = from_fx(gm, [x, i])
    text = str(graph)
    assert "builtin.getitem" not in text  # a tuple's getitem, never a tensor's
    assert {"torch.select", "torch.unsqueeze", "torch.ops.aten.slice.Tensor"} <= {
        node.op.name for node in graph.nodes
    }
    verify(graph)
    assert str(parse(text)) == text
    for got, want in zip(interpret(graph, x, i), _subscripts(x, i), strict=True):
        torch.testing.assert_close(got, want)
    too_many = torch.fx.symbolic_trace(lambda x: x[0, 1, 2])
    with pytest.raises(FxImportError, match="too many indices for a tensor of dimension 2"):
        from_fx(too_many, [x])
    mixed = torch.fx.symbolic_trace(lambda x, i: x[i, 1:])
    with pytest.raises(FxImportError, match="indexing a tensor with Node is not supported"):
        from_fx(mixed, [x, i])


def _attributes(x):
    return x.T * 2, x.mT + 1, x.real


def test_from_fx_imports_tensor_view_attributes():
    import pytest

    from torchstrata.core import FxImportError

    gm = torch.fx.symbolic_trace(_attributes)
    x = torch.randn(3, 4)
    graph = from_fx(gm, [x])
    assert graph.level is Level.TORCH
    verify(graph)
    for got, want in zip(interpret(graph, x), _attributes(x), strict=True):
        torch.testing.assert_close(got, want)
    grad_of = torch.fx.symbolic_trace(lambda x: x.grad_fn)
    with pytest.raises(FxImportError, match="the tensor attribute 'grad_fn' is not supported"):
        from_fx(grad_of, [x])


def test_from_fx_names_the_builtin_behind_f_pad_by_f_pad():
    # Dynamo's graphs call torch._C._nn.pad, the builtin F.pad (a Python function) wraps
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch._C._nn.pad, (x, (1, 2)), {"value": -1.0}))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    example = torch.randn(2, 3)
    imported = from_fx(gm, [example])
    (call,) = [node for node in imported.nodes if node.op is not None]
    assert call.op.name == "torch.nn.functional.pad"
    want = torch.nn.functional.pad(example, (1, 2), value=-1.0)
    torch.testing.assert_close(interpret(imported, example)[0], want)
