"""CPU training graphs are traced on meta tensors (no FakeTensorMode, no Dynamo import):
the joint graph must be exactly the one fake CPU tensors give."""

from __future__ import annotations

import contextlib
import operator

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from torchstrata.autograd import trace_graph
from torchstrata.autograd.devices import meta_trace_device
from torchstrata.autograd.trace import _trace  # the two tracing modes, side by side
from torchstrata.core import Graph, GraphBuilder, Level, TensorMeta, torch_op


def _grad(*shape):
    return TensorMeta(shape, torch.float32, requires_grad=True)


def _dropout_layer_norm() -> Graph:
    b = GraphBuilder(Level.TORCH)
    x, r, w, bias = (b.input(n, m) for n, m in zip("xrwb", [_grad(8, 16)] * 2 + [_grad(16)] * 2))
    h = b.call(torch_op(operator.add), x, b.call(torch_op(F.dropout), r, 0.1, True))
    return b.build([h, b.call(torch_op(F.layer_norm), h, (16,), w, bias)])


def _swiglu() -> Graph:
    b = GraphBuilder(Level.TORCH)
    x, y = b.input("x", _grad(8, 16)), b.input("y", _grad(8, 16))
    return b.build([b.call(torch_op(operator.mul), b.call(torch_op(F.silu), x), y)])


def _cross_entropy() -> Graph:
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", _grad(8, 16))
    t = b.input("t", TensorMeta((8,), torch.int64))
    return b.build([b.call(torch_op(F.cross_entropy), x, t)])


def _softmax_rms() -> Graph:
    b = GraphBuilder(Level.TORCH)
    x, w = b.input("x", _grad(8, 16)), b.input("w", _grad(16))
    normed = b.call(torch_op(F.rms_norm), x, (16,), w)
    return b.build([b.call(torch_op(torch.softmax), normed, -1)])


CASES = {
    "dropout_layer_norm": _dropout_layer_norm,
    "swiglu": _swiglu,
    "cross_entropy": _cross_entropy,
    "softmax_rms": _softmax_rms,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_cpu_training_graph_traces_the_same_on_meta_and_fake_tensors(name):
    graph = CASES[name]()
    assert meta_trace_device(graph, True) == torch.device("cpu")
    on_meta = _trace(graph, True, contextlib.nullcontext(), torch.device("cpu"))
    on_fake = _trace(graph, True, FakeTensorMode(), None)
    assert str(on_meta.graph) == str(on_fake.graph)
    assert str(trace_graph(graph, training=True).graph) == str(on_fake.graph)


def test_batch_norm_training_still_uses_fake_tensors():
    b = GraphBuilder(Level.TORCH)
    x, w = b.input("x", _grad(2, 3, 4, 4)), b.input("w", _grad(3))
    out = b.call(torch_op(F.batch_norm), x, None, None, w, None, True)
    assert meta_trace_device(b.build([out]), True) is None
