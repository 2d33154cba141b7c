"""Autocast regions (and the caller's autocast) traced with eager's casts, found by asking
autocast itself: the graph holds the casts, and with autocast off it gives eager's
dtypes and values under autocast."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

from torchstrata.core import interpret

W = torch.randn(4, 8)


def _without_autocast(graph, *inputs):
    """The graph's outputs with autocast off (how the runtime runs it)."""
    with torch.autocast("cpu", enabled=False):
        return interpret(graph, *inputs)


def _region(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = F.linear(x, w)
        return F.mse_loss(y, torch.zeros_like(y)), y.relu(), F.linear(x.double(), w.double())


def test_each_op_gets_the_casts_autocast_gives_it(captured):
    x = torch.randn(3, 8)
    _, graph = captured(_region, x, W)
    casts = [node.args[1] for node in graph.nodes if node.op.name == "torch.Tensor.to"]
    # linear's two inputs to bfloat16; mse_loss's two (bfloat16) inputs up to float32;
    # nothing for relu (autocast leaves it) nor for the float64 linear.
    assert casts == [torch.bfloat16, torch.bfloat16, torch.float32, torch.float32]
    expected = _region(x, W)
    got = _without_autocast(graph, x, W)
    assert [t.dtype for t in got] == [t.dtype for t in expected]
    for mine, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(mine, theirs)


def test_a_region_of_another_device_type_casts_nothing(captured):
    def cuda_region(x, w):
        with torch.autocast("cuda", dtype=torch.float16):
            return F.linear(x, w)

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "CUDA is not available", UserWarning)
        _, graph = captured(cuda_region, torch.randn(3, 8), W)
    assert "torch.Tensor.to" not in [op.name for op in graph.ops()]
    assert graph.outputs[0].meta.dtype == torch.float32


def test_the_callers_autocast_is_a_region_around_the_function(captured):
    def loss(x, w):
        return F.mse_loss(F.linear(x, w), torch.ones(3, 4)), F.linear(x, w)

    x = torch.randn(3, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, graph = captured(loss, x, W)
        expected = loss(x, W)
    assert [out.meta.dtype for out in graph.outputs] == [torch.float32, torch.bfloat16]
    for mine, theirs in zip(_without_autocast(graph, x, W), expected, strict=True):
        assert mine.dtype == theirs.dtype
        torch.testing.assert_close(mine, theirs)
