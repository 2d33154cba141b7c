"""CPU graphs record the CPU kernels' strides where torch's meta kernels answer otherwise
(padding, roll, batch norm, floor division, convolution with a channels-last weight), forward and
backward, whether the trace runs on meta tensors or on fake CPU tensors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchstrata.autograd import trace_graph
from torchstrata.autograd.cpu_layouts import dense_strides, suggest_memory_format
from torchstrata.core import GraphBuilder, Level, TensorMeta, torch_op


def _channels_last(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).to(memory_format=torch.channels_last)


def _channels_last_3d(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).to(memory_format=torch.channels_last_3d)


def _transposed(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).mT.contiguous().mT


#: name -> (torch callable, its tensor arguments, further arguments, keyword arguments)
CASES = {
    "reflect pad channels-last": (
        F.pad,
        [_channels_last(2, 3, 4, 5)],
        ((1, 2, 0, 1),),
        {"mode": "reflect"},
    ),
    "negative replicate pad channels-last": (
        F.pad,
        [_channels_last(2, 3, 6, 5)],
        ((-1, 1, 1, -2),),
        {"mode": "replicate"},
    ),
    "replicate pad channels-last-3d": (
        F.pad,
        [_channels_last_3d(2, 3, 4, 4, 3)],
        ((1, 0, 1, 1, 0, 1),),
        {"mode": "replicate"},
    ),
    "reflect pad transposed": (
        F.pad,
        [_transposed(2, 3, 5, 4)],
        ((1, 1, 1, 1),),
        {"mode": "reflect"},
    ),
    "roll channels-last": (torch.roll, [_channels_last(2, 3, 4, 5)], (1, 1), {}),
    "roll two dims channels-last": (
        torch.roll,
        [_channels_last(2, 3, 4, 5)],
        ((1, -1), (2, 3)),
        {},
    ),
    "roll flat channels-last": (torch.roll, [_channels_last(2, 3, 4, 5)], (3,), {}),
    "batch norm transposed": (
        F.batch_norm,
        [_transposed(3, 4, 2), torch.zeros(4), torch.ones(4)],
        (),
        {"training": True},
    ),
    "batch norm transposed 4-d": (
        F.batch_norm,
        [_transposed(2, 3, 5, 4)],
        (None, None),
        {"training": True},
    ),
    "batch norm eval transposed": (
        F.batch_norm,
        [_transposed(5, 5, 5), torch.zeros(5), torch.ones(5)],
        (),
        {"training": False},
    ),
    "floor division transposed": (
        torch.div,
        [_transposed(5, 10), torch.tensor(4.5)],
        (),
        {"rounding_mode": "floor"},
    ),
    "conv unbatched channels-last weight": (
        F.conv2d,
        [torch.randn(3, 5, 5), _channels_last(4, 3, 3, 3)],
        (),
        {},
    ),
    "conv batch-1 channels-last weight": (
        F.conv2d,
        [torch.randn(1, 3, 5, 5), _channels_last(4, 3, 3, 3)],
        (),
        {},
    ),
    "conv1d unbatched transposed weight": (
        F.conv1d,
        [torch.randn(3, 6), _transposed(4, 3, 2)],
        (),
        {},
    ),
    "conv_transpose2d unbatched channels-last weight": (
        F.conv_transpose2d,
        [torch.randn(3, 4, 4), _channels_last(3, 2, 3, 3)],
        (),
        {},
    ),
}


def _leaves(tensors, training):
    """Copies of ``tensors``; with ``training`` all but the running statistics (1-D)
    require grad."""
    return [t.detach().clone().requires_grad_(training and t.dim() > 1) for t in tensors]


def _graph(fn, tensors, args, kwargs, training):
    builder = GraphBuilder(Level.TORCH)
    inputs = [
        builder.input(f"x{i}", TensorMeta.from_tensor(t))
        for i, t in enumerate(_leaves(tensors, training))
    ]
    op = torch_op(fn)
    assert op is not None
    return builder.build([builder.call(op, *inputs, *args, **kwargs)])


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("training", [False, True])
def test_traced_strides_are_the_cpu_kernels(name, training):
    fn, tensors, args, kwargs = CASES[name]
    trace = trace_graph(_graph(fn, tensors, args, kwargs, training), training=training)
    leaves = _leaves(tensors, training)
    with torch.set_grad_enabled(training):
        want = fn(*leaves, *args, **kwargs)
    outputs = [node.tensor_meta for node in trace.graph.outputs]
    assert outputs[0].strides == want.stride()
    if training:
        wanted = [i for i, leaf in enumerate(leaves) if leaf.requires_grad]
        grads = torch.autograd.grad(want, [leaves[i] for i in wanted], torch.randn(want.shape))
        traced = dict(zip(trace.grad_inputs, outputs[trace.num_forward_outputs :], strict=True))
        assert set(traced) == set(wanted)
        for index, grad in zip(wanted, grads, strict=True):
            assert traced[index].strides == grad.stride(), f"gradient {index}"


STRIDINGS = [
    ((2, 3, 4, 5), None),
    ((2, 3, 4, 5), torch.channels_last),
    ((1, 3, 4, 5), torch.channels_last),
    ((2, 1, 4, 5), torch.channels_last),
    ((2, 3, 1, 1), torch.channels_last),
    ((1, 1, 1, 1), torch.channels_last),
    ((2, 3, 4, 5), "transposed"),
    ((2, 3, 4, 5, 2), torch.channels_last_3d),
    ((1, 3, 1, 5, 2), torch.channels_last_3d),
    ((2, 3, 4, 5, 2), None),
    ((3, 2, 1, 4), "transposed"),
]


@pytest.mark.parametrize(("shape", "layout"), STRIDINGS, ids=str)
def test_suggest_memory_format_is_atens(shape, layout):
    """Replication padding by nothing returns a new tensor in the input's suggested memory
    format on the CPU: ours must name the same format and the same strides."""
    x = torch.randn(shape)
    if layout == "transposed":
        x = x.mT.contiguous().mT
    elif layout is not None:
        x = x.to(memory_format=layout)
    pad = torch.ops.aten.replication_pad2d if len(shape) == 4 else torch.ops.aten.replication_pad3d
    eager = pad(x, [0] * (2 * (len(shape) - 2)))
    assert dense_strides(shape, suggest_memory_format(shape, x.stride())) == eager.stride()
