"""The Dynamo backend entry point: FX graph in, our stages, a callable out."""

from __future__ import annotations

import importlib.metadata

import pytest
import torch
import torch.fx
import torch.nn.functional as F

import torchstrata.runtime as rt
from torchstrata.runtime.dynamo_backend import torchstrata_backend


def demo_fn(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.softmax(F.gelu(x + b), -1)


def test_backend_runs_fx_graph_and_keeps_output_structure(recwarn):
    gm = torch.fx.symbolic_trace(lambda x, b: (demo_fn(x, b), x - b))
    x, b = torch.randn(4, 8), torch.randn(8)
    compiled = torchstrata_backend(gm, [x, b])
    result = compiled(x, b)
    assert isinstance(result, tuple) and len(result) == 2
    torch.testing.assert_close(result[0], demo_fn(x, b))
    torch.testing.assert_close(result[1], x - b)


def test_backend_falls_back_to_fx_forward():
    module = torch.fx.symbolic_trace(torch.nn.Linear(3, 2))  # get_attr nodes: not importable
    with pytest.warns(rt.TorchstrataFallbackWarning, match="dynamo backend"):
        compiled = torchstrata_backend(module, [torch.randn(1, 3)])
    assert compiled == module.forward


def test_backend_entry_point_is_declared():
    points = importlib.metadata.entry_points(group="torch_dynamo_backends")
    assert any(p.name == "torchstrata" and p.value.endswith(":torchstrata_backend") for p in points)


def test_under_autocast_the_fx_graph_runs_as_it_is():
    """Dynamo's graph holds no autocast casts: compiled with autocast off it would come
    back float32 where eager gives bfloat16."""

    def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w) + 1

    gm = torch.fx.symbolic_trace(linear)
    x, w = torch.randn(4, 8), torch.randn(3, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.warns(rt.TorchstrataFallbackWarning, match="autocast is enabled"):
            compiled = torchstrata_backend(gm, [x, w])
        result, expected = compiled(x, w), linear(x, w)
    assert result.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(result, expected)
