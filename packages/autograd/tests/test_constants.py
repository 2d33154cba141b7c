"""Constant tensors made inside a graph (``torch.tensor([...])``): 0-dim ones become
``scalar_tensor`` nodes, larger ones hidden inputs (``AotResult.constants``)."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from torchstrata.autograd import aot, aot_forward
from torchstrata.core import GraphBuilder, Level, TensorMeta, interpret, torch_op, verify


def _graph(body, *metas: TensorMeta):
    """A torch graph: ``body(builder, call, *inputs)`` returns its output nodes."""
    b = GraphBuilder(Level.TORCH)
    inputs = [b.input(f"x{i}", meta) for i, meta in enumerate(metas)]

    def call(fn, *args, **kwargs):
        return b.call(torch_op(fn), *args, **kwargs)

    return b.build(list(body(b, call, *inputs)))


def _run(result, *inputs):
    """The forward's outputs for ``inputs``, passing the lifted constants after them."""
    assert len(result.forward.inputs) == len(inputs) + len(result.constants)
    return interpret(result.forward, *inputs, *result.constants)


def _scaled(b, call, x):
    return [call(operator.mul, x, call(torch.tensor, [1.0, 2.0, 3.0, 4.0]))]


def _scaled_group_norm(b, call, x):
    # group_norm is traced on fake tensors (its ATen form depends on the device), the
    # other graphs on meta tensors: both tracers lift constants.
    return [call(F.group_norm, call(operator.mul, x, call(torch.tensor, [1.0, 2.0, 3.0, 4.0])), 2)]


@pytest.mark.parametrize("body", [_scaled, _scaled_group_norm])
def test_a_read_only_constant_becomes_a_hidden_input(body):
    graph = _graph(body, TensorMeta((3, 4), torch.float32))
    result = aot_forward(graph)
    verify(result.forward)
    (constant,) = result.constants
    torch.testing.assert_close(constant, torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert result.forward.inputs[-1].tensor_meta.shape == (4,)
    x = torch.randn(3, 4)
    (got,) = _run(result, x)
    torch.testing.assert_close(got, interpret(graph, x)[0])


def test_a_zero_dim_constant_stays_a_scalar_tensor_node():
    graph = _graph(
        lambda b, call, x: [call(operator.mul, x, call(torch.tensor, 2.5))],
        TensorMeta((3,), torch.float32),
    )
    result = aot_forward(graph)
    assert result.constants == ()
    assert "aten.scalar_tensor.default" in [op.name for op in result.forward.ops()]
    x = torch.randn(3)
    torch.testing.assert_close(_run(result, x)[0], x * 2.5)


def test_a_constant_written_in_place_is_not_written_back():
    def body(b, call, x):
        c = call(torch.tensor, [1.0, 2.0])
        return [call(torch.Tensor.add_, c, call(torch.sum, x))]

    graph = _graph(body, TensorMeta((3,), torch.float32))
    result = aot_forward(graph)
    assert result.mutated_inputs == ()
    x = torch.ones(3)
    for _ in range(2):  # every call starts from the original values
        (got,) = _run(result, x)
        torch.testing.assert_close(got, torch.tensor([4.0, 5.0]))
    torch.testing.assert_close(result.constants[0], torch.tensor([1.0, 2.0]))


def test_a_returned_constant_and_its_view_are_copies():
    def body(b, call, x):
        c = call(torch.tensor, [[1.0, 2.0], [3.0, 4.0]])
        return [c, call(operator.getitem, c, 1), call(operator.add, x, 1)]

    graph = _graph(body, TensorMeta((2,), torch.float32))
    result = aot_forward(graph)
    assert not any(node.is_input for node in result.forward.outputs)
    (constant,) = result.constants
    whole, row, _ = _run(result, torch.zeros(2))
    torch.testing.assert_close(whole, constant)
    torch.testing.assert_close(row, constant[1])
    assert whole.data_ptr() != constant.data_ptr()
    assert row.untyped_storage().data_ptr() != constant.untyped_storage().data_ptr()
    # the row is described as a view of the whole, as in eager
    assert result.output_views[1] == (0, (2,), (1,), 2)


def test_index_and_mask_constants_keep_their_dtypes():
    def body(b, call, x):
        index = call(torch.tensor, [0, 2, 4])
        mask = call(torch.tensor, [True, False, True, False, True])
        picked = call(operator.getitem, x, index)
        return [picked, call(torch.where, mask, x, 0.0)]

    graph = _graph(body, TensorMeta((5,), torch.float32))
    result = aot_forward(graph)
    assert [c.dtype for c in result.constants] == [torch.int64, torch.bool]
    x = torch.randn(5)
    for got, want in zip(_run(result, x), interpret(graph, x), strict=True):
        torch.testing.assert_close(got, want)


def test_an_unused_constant_is_dropped():
    def body(b, call, x):
        call(torch.tensor, [1.0, 2.0])
        return [call(operator.add, x, 1)]

    result = aot_forward(_graph(body, TensorMeta((2,), torch.float32)))
    assert result.constants == ()
    assert len(result.forward.inputs) == 1


def test_training_through_a_constant_matches_eager_gradients():
    graph = _graph(_scaled, TensorMeta((3, 4), torch.float64, requires_grad=True))
    result = aot(graph)
    assert result.backward is not None and result.grad_inputs == (0,)
    assert len(result.constants) == 1
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    outputs = _run(result, x.detach())
    n = result.num_user_outputs + result.num_mutations
    saved = outputs[n : n + result.num_saved]
    tangent = torch.randn(3, 4, dtype=torch.float64)
    (grad,) = interpret(result.backward, *saved, tangent)
    (expected,) = torch.autograd.grad(interpret(graph, x)[0], x, tangent)
    torch.testing.assert_close(grad, expected)
    torch.testing.assert_close(outputs[0], interpret(graph, x)[0].detach())


def test_a_large_constant_is_one_input():
    values = torch.arange(1000, dtype=torch.float32).tolist()
    graph = _graph(
        lambda b, call, x: [call(operator.add, x, call(torch.tensor, values))],
        TensorMeta((1000,), torch.float32),
    )
    result = aot_forward(graph)
    assert len(result.forward.nodes) == 1  # the add: no op per element
    x = torch.randn(1000)
    torch.testing.assert_close(_run(result, x)[0], x + torch.arange(1000.0))


def test_a_real_tensor_not_made_in_the_graph_is_named_in_the_error():
    outside = torch.ones(3)
    graph = _graph(
        lambda b, call, x: [call(operator.add, x, outside, meta=x.meta)],
        TensorMeta((3,), torch.float32),
    )
    with pytest.raises(NotImplementedError, match=r"tensor \(3,\) torch.float32 was not produced"):
        aot_forward(graph)


def test_a_fake_tensor_of_another_trace_is_named_in_the_error():
    with FakeTensorMode():
        stray = torch.ones(3)
    graph = _graph(
        lambda b, call, x: [call(operator.add, x, stray, meta=x.meta)],
        TensorMeta((3,), torch.float32),
    )
    with pytest.raises(NotImplementedError, match="fake or meta tensor that the traced graph"):
        aot_forward(graph)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_cpu_constant_that_only_indexes_a_cuda_tensor_moves_to_cuda():
    def indexed(b, call, x):
        return [call(operator.getitem, x, call(torch.tensor, [0, 2]))]

    def also_returned(b, call, x):
        index = call(torch.tensor, [0, 2])
        return [call(operator.getitem, x, index), index]

    cuda = TensorMeta((3,), torch.float32, torch.device("cuda", 0))
    moved = aot_forward(_graph(indexed, cuda))
    assert moved.constants[0].device.type == "cuda"
    assert moved.forward.inputs[-1].tensor_meta.device.type == "cuda"
    x = torch.randn(3, device="cuda")
    torch.testing.assert_close(_run(moved, x)[0], x[[0, 2]])
    kept = aot_forward(_graph(also_returned, cuda))  # eager returns a CPU tensor
    assert kept.constants[0].device.type == "cpu"
