"""aot_forward on the demo graph, an MLP, methods and views, multi-output ops and dtypes."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F

from torchstrata.autograd import aot_forward
from torchstrata.core import GETITEM, Level, aten, format_graph, parse, verify


def _op_names(graph):
    return [op.name for op in graph.ops()]


def test_demo_graph_gives_add_gelu_softmax(aot):
    b, (x, bias) = aot.builder(x=((64, 128), torch.float32), b=((128,), torch.float32))
    out = aot.call(b, torch.softmax, aot.call(b, F.gelu, aot.call(b, operator.add, x, bias)), -1)
    forward = aot.check(b.build([out]))
    assert _op_names(forward) == ["aten.add.Tensor", "aten.gelu.default", "aten._softmax.default"]


def test_parsed_torch_graph_round_trips_through_text(aot):
    graph = parse(
        """
        graph torch {
          %x: f32[8, 16] = input
          %y: f32[8, 16] = torch.nn.functional.gelu(%x, approximate='tanh')
          %z: f32[8, 16] = torch.Tensor.softmax(%y, dim=1)
          return %z
        }
        """
    )
    forward = aot.check(graph)
    assert parse(format_graph(forward)).ops() == forward.ops()
    assert forward.node("gelu").kwargs == {"approximate": "tanh"}


def test_linear_gelu_linear_mlp_with_weight_and_bias_inputs(aot):
    b, (x, w1, b1, w2, b2) = aot.builder(
        x=((4, 16), torch.float32),
        w1=((32, 16), torch.float32),
        b1=((32,), torch.float32),
        w2=((8, 32), torch.float32),
        b2=((8,), torch.float32),
    )
    hidden = aot.call(b, F.gelu, aot.call(b, F.linear, x, w1, b1))
    out = aot.call(b, torch.softmax, aot.call(b, F.linear, hidden, w2, b2), -1)
    forward = aot.check(b.build([out]))
    names = _op_names(forward)
    assert "aten.gelu.default" in names
    assert "aten.addmm.default" in names or "aten.linear.default" in names
    assert not any(name.startswith("torch.") for name in names)


def test_methods_and_views_on_a_batched_linear(aot):
    b, (x, w) = aot.builder(x=((2, 3, 8), torch.float32), w=((4, 8), torch.float32))
    y = aot.call(b, F.linear, x, w)  # 3-D input: dispatch adds views around mm
    t = aot.call(b, torch.Tensor.transpose, y, 0, 1)
    v = aot.call(b, torch.Tensor.view, aot.call(b, torch.Tensor.contiguous, t), 3, 8)
    s = aot.call(b, torch.Tensor.sum, v, 1)
    forward = aot.check(b.build([s, t]))
    names = _op_names(forward)
    assert "aten.transpose.int" in names and "aten.sum.dim_IntList" in names


@pytest.mark.parametrize("which", ["var_mean", "max_dim"])
def test_multi_output_ops_become_getitem_nodes(aot, which):
    b, (x,) = aot.builder(x=((6, 5), torch.float32))
    if which == "var_mean":
        pair = aot.call(b, torch.var_mean, x, 1)
    else:
        pair = aot.call(b, torch.max, x, 1)
    first, second = b.getitem(pair, 0), b.getitem(pair, 1)
    forward = aot.check(b.build([first, second]))
    expected = {"var_mean": "aten.var_mean.correction", "max_dim": "aten.max.dim"}[which]
    assert expected in _op_names(forward)
    assert all(output.op == GETITEM for output in forward.outputs)


def test_scalar_arithmetic_keeps_python_scalars_as_constants(aot):
    b, (x,) = aot.builder(x=((5, 7), torch.float32))
    y = aot.call(b, operator.mul, x, 2.5)
    y = aot.call(b, operator.add, y, 1)
    y = aot.call(b, operator.sub, 3, y)
    y = aot.call(b, operator.pow, y, 2)
    y = aot.call(b, operator.truediv, y, 4)
    forward = aot.check(b.build([y]))
    assert forward.node("mul").args[1] == 2.5
    assert all(node.op is not None and node.op.kind.value == "aten" for node in forward.nodes)


def test_int_and_bool_dtypes(aot):
    b, (i, m, f) = aot.builder(
        i=((4, 6), torch.int64), m=((4, 6), torch.bool), f=((4, 6), torch.float32)
    )
    j = aot.call(b, operator.floordiv, aot.call(b, operator.add, i, 3), 2)
    positive = aot.call(b, operator.gt, j, 0)
    mask = aot.call(b, operator.and_, positive, aot.call(b, operator.invert, m))
    chosen = aot.call(b, torch.where, mask, f, aot.call(b, torch.Tensor.to, j, torch.float32))
    count = aot.call(b, torch.Tensor.sum, aot.call(b, torch.Tensor.int, mask), 1)
    forward = aot.check(b.build([j, mask, chosen, count]))
    assert [out.tensor_meta.dtype for out in forward.outputs] == [
        torch.int64,
        torch.bool,
        torch.float32,
        torch.int64,
    ]


def test_outputs_that_are_inputs_are_passed_through(aot):
    b, (x, y) = aot.builder(x=((3,), torch.float32), y=((3,), torch.float32))
    s = aot.call(b, operator.add, x, y)
    forward = aot.check(b.build([x, s, x]))
    assert forward.outputs[0] is forward.inputs[0] and forward.outputs[2] is forward.inputs[0]
    assert len(forward.nodes) == 1


def test_factory_ops_inside_the_graph_become_nodes(aot):
    b, (x,) = aot.builder(x=((3, 4), torch.float32))
    ones = aot.call(b, torch.ones_like, x)
    full = aot.call(b, torch.full, (3, 4), 2.0)
    out = aot.call(b, operator.add, aot.call(b, operator.mul, x, full), ones)
    forward = aot.check(b.build([out]))
    assert any(name.startswith("aten.full") for name in _op_names(forward))


def test_dead_code_from_dispatch_is_dropped(aot):
    b, (x,) = aot.builder(x=((3, 4), torch.float32))
    aot.call(b, torch.exp, x)  # unused at torch level
    out = aot.call(b, torch.relu, x)
    forward = aot.check(b.build([out]))
    assert _op_names(forward) == ["aten.relu.default"]


def test_metadata_uses_the_inputs_device_not_meta(aot):
    b, (x,) = aot.builder(x=((2, 2), torch.float32))
    forward = aot.check(b.build([aot.call(b, torch.sin, x)]))
    assert all(node.tensor_meta.device == torch.device("cpu") for node in forward.nodes)
    assert forward.level is Level.ATEN
    assert forward.ops() == [aten("sin.default")]


def test_non_contiguous_inputs_keep_their_strides(aot):
    graph = parse(
        """
        graph torch {
          %x: f32[4, 6]{1, 4} = input
          %y: f32[4, 6] = torch.Tensor.exp(%x)
          %z: f32[24] = torch.Tensor.reshape(%x, -1)
          return %y, %z
        }
        """
    )
    forward = aot.check(graph)
    assert forward.inputs[0].tensor_meta.strides == (1, 4)
    assert "aten.clone.default" in _op_names(forward) or "aten._unsafe_view.default" in _op_names(
        forward
    )


def test_cuda_metadata_is_kept_without_a_gpu():
    graph = parse(
        """
        graph torch {
          %x: f32[64, 128] cuda:0 = input
          %b: f32[128] cuda:0 = input
          %a: f32[64, 128] cuda:0 = operator.add(%x, %b)
          %g: f32[64, 128] cuda:0 = torch.nn.functional.gelu(%a)
          %s: f32[64, 128] cuda:0 = torch.softmax(%g, -1)
          return %s
        }
        """
    )
    forward = aot_forward(graph).forward
    verify(forward)
    assert {node.tensor_meta.device for node in forward.nodes} == {torch.device("cuda", 0)}
    assert _op_names(forward) == ["aten.add.Tensor", "aten.gelu.default", "aten._softmax.default"]


def test_cpu_inference_traces_on_meta_tensors_like_on_fake_ones(aot):
    # traced on meta tensors (no FakeTensorMode): the metadata still says cpu
    b, (x, bias) = aot.builder(x=((4, 8), torch.float32), b=((8,), torch.float32))
    out = aot.call(b, torch.softmax, aot.call(b, operator.add, x, bias), -1)
    forward = aot.check(b.build([out]))
    assert {node.tensor_meta.device.type for node in forward.nodes} == {"cpu"}


def test_device_dispatched_ops_are_traced_on_fake_tensors(aot):
    # batch_norm's ATen form differs between cpu and meta: saved stats are empty on cpu
    b, (x, w, rm, rv) = aot.builder(
        x=((2, 3, 4, 4), torch.float32),
        w=((3,), torch.float32),
        rm=((3,), torch.float32),
        rv=((3,), torch.float32),
    )
    out = aot.call(b, F.batch_norm, x, rm, rv, w, None, False)
    forward = aot_forward(b.build([out])).forward
    [node] = [n for n in forward.nodes if n.op.name == "aten.native_batch_norm.default"]
    assert [meta.shape for meta in node.meta] == [(2, 3, 4, 4), (0,), (0,)]
