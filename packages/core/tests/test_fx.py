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
