"""CPU training graphs are traced on meta tensors (no FakeTensorMode, no Dynamo import):
the joint graph must be exactly the one fake CPU tensors give."""

from __future__ import annotations

import contextlib
import operator

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from torchstrata.autograd import aot, trace_graph
from torchstrata.autograd.devices import meta_trace_device
from torchstrata.autograd.trace import _trace  # the two tracing modes, side by side
from torchstrata.core import Graph, GraphBuilder, Level, TensorMeta, torch_op


def _grad(*shape, dtype=torch.float32):
    return TensorMeta(shape, dtype, requires_grad=True)


def _dropout_layer_norm(dtype=torch.float32) -> Graph:
    b = GraphBuilder(Level.TORCH)
    metas = [_grad(8, 16, dtype=dtype)] * 2 + [_grad(16, dtype=dtype)] * 2
    x, r, w, bias = (b.input(n, m) for n, m in zip("xrwb", metas))
    h = b.call(torch_op(operator.add), x, b.call(torch_op(F.dropout), r, 0.1, True))
    return b.build([h, b.call(torch_op(F.layer_norm), h, (16,), w, bias)])


def _swiglu(dtype=torch.float32) -> Graph:
    b = GraphBuilder(Level.TORCH)
    x, y = b.input("x", _grad(8, 16, dtype=dtype)), b.input("y", _grad(8, 16, dtype=dtype))
    return b.build([b.call(torch_op(operator.mul), b.call(torch_op(F.silu), x), y)])


def _cross_entropy(dtype=torch.float32) -> Graph:
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", _grad(8, 16, dtype=dtype))
    t = b.input("t", TensorMeta((8,), torch.int64))
    return b.build([b.call(torch_op(F.cross_entropy), x, t)])


def _softmax_rms(dtype=torch.float32) -> Graph:
    b = GraphBuilder(Level.TORCH)
    x, w = b.input("x", _grad(8, 16, dtype=dtype)), b.input("w", _grad(16, dtype=dtype))
    normed = b.call(torch_op(F.rms_norm), x, (16,), w)
    return b.build([b.call(torch_op(torch.softmax), normed, -1)])


CASES = {
    "dropout_layer_norm": _dropout_layer_norm,
    "swiglu": _swiglu,
    "cross_entropy": _cross_entropy,
    "softmax_rms": _softmax_rms,
}


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@pytest.mark.parametrize("dtype_name", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_cpu_training_graph_traces_the_same_on_meta_and_fake_tensors(name, dtype_name):
    graph = CASES[name](DTYPES[dtype_name])
    assert meta_trace_device(graph, True) == torch.device("cpu")
    on_meta = _trace(graph, True, contextlib.nullcontext(), torch.device("cpu"))
    on_fake = _trace(graph, True, FakeTensorMode(), None)
    assert str(on_meta.graph) == str(on_fake.graph)
    assert str(trace_graph(graph, training=True).graph) == str(on_fake.graph)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cpu_layer_norm_saves_its_statistics_in_the_input_dtype_like_eager(dtype):
    """The meta kernel keeps float16/bfloat16 mean and rstd in float32, the CPU kernel
    (and the decomposition, which follows it) in the input dtype: a meta trace standing
    for the CPU must say the latter, or the compiled backward reads the saved statistics
    as float32 (past their end)."""
    graph = _dropout_layer_norm(dtype)
    assert meta_trace_device(graph, True) == torch.device("cpu")
    x, w, bias = (torch.randn(8, 16, dtype=dtype), torch.ones(16, dtype=dtype), None)
    eager = torch.native_layer_norm(x, (16,), w, bias, 1e-5)
    result = aot(graph)
    saved = result.forward.outputs[result.num_user_outputs :]
    stats = [node for node in saved if node.tensor_meta.shape == (8, 1)]
    assert [node.tensor_meta.dtype for node in stats] == [eager[1].dtype, eager[2].dtype]
    assert [node.tensor_meta.dtype for node in result.backward.inputs[: len(saved)]] == [
        node.tensor_meta.dtype for node in saved
    ]


def test_batch_norm_training_still_uses_fake_tensors():
    b = GraphBuilder(Level.TORCH)
    x, w = b.input("x", _grad(2, 3, 4, 4)), b.input("w", _grad(3))
    out = b.call(torch_op(F.batch_norm), x, None, None, w, None, True)
    assert meta_trace_device(b.build([out]), True) is None
