"""CPU graphs record the CPU kernels' strides where torch's meta kernels answer otherwise
(padding, roll, batch norm, floor division, convolution with a channels-last weight, pointwise
backward ops, losses' backward ops, shuffles, LAPACK results), forward and backward, whether
the trace runs on meta tensors or on fake CPU tensors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchstrata.autograd import trace_graph
from torchstrata.autograd.cpu_layouts import cpu_layout, dense_strides, suggest_memory_format
from torchstrata.core import GraphBuilder, Level, TensorMeta, same_layout, torch_op


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
    # backward ops whose meta kernel follows the input where the CPU's TensorIterator
    # follows the (row-major) tangent, or allocates row-major
    "hardtanh transposed": (F.hardtanh, [_transposed(5, 4)], (), {}),
    "hardswish channels-last": (F.hardswish, [_channels_last(2, 3, 4, 5)], (), {}),
    "hardsigmoid transposed": (F.hardsigmoid, [_transposed(3, 5, 4)], (), {}),
    "logit transposed": (torch.logit, [_transposed(5, 4)], (1e-3,), {}),
    "softplus channels-last": (F.softplus, [_channels_last(2, 3, 4, 5)], (), {}),
    "elu transposed": (F.elu, [_transposed(5, 4)], (), {}),
    "selu channels-last": (F.selu, [_channels_last(2, 3, 4, 5)], (), {}),
    "logsigmoid transposed": (F.logsigmoid, [_transposed(5, 4)], (), {}),
    "log_softmax transposed": (torch.log_softmax, [_transposed(5, 4)], (0,), {}),
    "glu channels-last": (F.glu, [_channels_last(2, 4, 3, 5)], (1,), {}),
    "mse_loss transposed": (
        F.mse_loss,
        [_transposed(5, 4), _transposed(5, 4)],
        (),
        {"reduction": "none"},
    ),
    "smooth_l1_loss channels-last": (
        F.smooth_l1_loss,
        [_channels_last(2, 3, 4, 5), _channels_last(2, 3, 4, 5)],
        (),
        {"reduction": "none"},
    ),
    "huber_loss transposed": (
        F.huber_loss,
        [_transposed(5, 4), torch.randn(5, 4)],
        (),
        {"reduction": "none"},
    ),
    "binary_cross_entropy transposed": (
        F.binary_cross_entropy,
        [torch.rand(5, 4).mT.contiguous().mT, torch.rand(5, 4)],
        (),
        {"reduction": "none"},
    ),
    "xlogy transposed": (torch.xlogy, [_transposed(5, 4), torch.rand(5, 4)], (), {}),
    "pixel_shuffle channels-last": (F.pixel_shuffle, [_channels_last(1, 8, 2, 3)], (2,), {}),
    "channel_shuffle channels-last": (
        F.channel_shuffle,
        [_channels_last(1, 4, 3, 3)],
        (2,),
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


def _meta(value):
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return value


def _layouts_2d():
    return [torch.randn(4, 6), _transposed(4, 6)]


def _layouts_4d():
    return [torch.randn(2, 3, 4, 5), _channels_last(2, 3, 4, 5), _transposed(2, 3, 4, 5)]


def _pairs():
    """(tangent, input) pairs of one shape in every combination of layouts."""
    for make in (_layouts_2d, _layouts_4d):
        for grad in make():
            for x in make():
                if grad.shape == x.shape:
                    yield grad, x


aten = torch.ops.aten
#: name -> callable giving (ATen overload, argument lists to call it with)
KERNELS = {
    "hardtanh_backward": lambda: (
        aten.hardtanh_backward.default,
        [(g, x, -0.5, 0.5) for g, x in _pairs()],
    ),
    "hardswish_backward": lambda: (aten.hardswish_backward.default, list(_pairs())),
    "hardsigmoid_backward": lambda: (aten.hardsigmoid_backward.default, list(_pairs())),
    "logit_backward": lambda: (
        aten.logit_backward.default,
        [(g, x.sigmoid(), 1e-3) for g, x in _pairs()],
    ),
    "softplus_backward": lambda: (
        aten.softplus_backward.default,
        [(g, x, 1.0, 20.0) for g, x in _pairs()],
    ),
    "elu_backward": lambda: (
        aten.elu_backward.default,
        [(g, 1.0, 1.0, 1.0, False, x) for g, x in _pairs()],
    ),
    "native_dropout_backward": lambda: (
        aten.native_dropout_backward.default,
        [(g, x > 0, 2.0) for g, x in _pairs()],
    ),
    "xlogy": lambda: (aten.xlogy.Tensor, list(_pairs())),
    "xlogy broadcast": lambda: (
        aten.xlogy.Tensor,
        [(x, torch.rand(x.shape[-1])) for x in _layouts_4d()]
        + [(torch.rand(x.shape[-1]), x) for x in _layouts_4d()],
    ),
    "pow.Scalar": lambda: (
        aten.pow.Scalar,
        [(base, x) for base in (2.0, 1.0) for x in _layouts_2d() + _layouts_4d()],
    ),
    "log_sigmoid_forward": lambda: (
        aten.log_sigmoid_forward.default,
        [(x,) for x in _layouts_2d() + _layouts_4d()],
    ),
    "_log_softmax_backward_data": lambda: (
        aten._log_softmax_backward_data.default,
        [(g, x.log_softmax(1), 1, torch.float32) for g, x in _pairs()],
    ),
    "glu_backward": lambda: (
        aten.glu_backward.default,
        [(g, x, 1) for g in _layouts_4d() for x in (_channels_last(2, 6, 4, 5),)]
        + [(torch.randn(2, 3, 4, 5), torch.randn(2, 6, 4, 5), 1)],
    ),
    "mse_loss_backward": lambda: (
        aten.mse_loss_backward.default,
        [(g, x, x.flip(0), 0) for g, x in _pairs()],
    ),
    "smooth_l1_loss_backward": lambda: (
        aten.smooth_l1_loss_backward.default,
        [(g, x, x.flip(0), 0, 1.0) for g, x in _pairs()],
    ),
    "huber_loss_backward": lambda: (
        aten.huber_loss_backward.default,
        [(g, x, x.flip(0), 0, 1.0) for g, x in _pairs()],
    ),
    "binary_cross_entropy": lambda: (
        aten.binary_cross_entropy.default,
        [(x.sigmoid(), torch.rand(x.shape), None, r) for x in _layouts_4d() for r in (0, 1)],
    ),
    "binary_cross_entropy_backward": lambda: (
        aten.binary_cross_entropy_backward.default,
        [(g, x.sigmoid(), torch.rand(x.shape), None, 0) for g, x in _pairs()],
    ),
    "pixel_unshuffle": lambda: (
        aten.pixel_unshuffle.default,
        [(x, 2) for x in (torch.randn(1, 2, 4, 6), _channels_last(1, 2, 4, 6))],
    ),
    "max_unpool2d": lambda: (
        aten.max_unpool2d.default,
        [
            (x, torch.zeros(x.shape, dtype=torch.long), [4, 6])
            for x in (torch.randn(1, 2, 2, 3), _channels_last(1, 2, 2, 3))
        ],
    ),
    "_linalg_svd": lambda: (
        aten._linalg_svd.default,
        [(a, False) for a in (torch.randn(4, 3), torch.randn(2, 3, 5), _transposed(3, 4))],
    ),
    "linalg_eig": lambda: (
        aten.linalg_eig.default,
        [(a,) for a in (torch.randn(4, 4), torch.randn(2, 3, 3))],
    ),
}


@pytest.mark.parametrize("name", list(KERNELS))
def test_rules_give_the_cpu_kernels_strides(name):
    """Each ruled op on meta tensors, through ``cpu_layout``, lays its results out as the
    CPU kernel does for operands of the same shapes and strides."""
    op, calls = KERNELS[name]()
    for args in calls:
        want = op(*args)
        meta = cpu_layout(
            op, tuple(_meta(a) for a in args), {}, op(*map(_meta, args)), on_meta=True
        )
        wants = want if isinstance(want, tuple) else (want,)
        metas = meta if isinstance(meta, tuple) else (meta,)
        described = [(tuple(a.shape), a.stride()) for a in args if isinstance(a, torch.Tensor)]
        for index, (cpu, ours) in enumerate(zip(wants, metas, strict=True)):
            if cpu.numel() > 1:
                assert same_layout(cpu.shape, ours.stride(), cpu.stride()), (
                    f"result {index} of {described}: {ours.stride()} vs {cpu.stride()}"
                )


def test_tensor_iterator_strides_equal_the_cpu_kernels_over_permuted_and_broadcast_operands():
    """The TensorIterator rule's strides (from ATen's meta function, no private torch
    module) equal a real CPU binary op's, for every dim order of one operand against
    row-major, channels-last, broadcast, sliced and expanded others, in both orders."""
    import itertools

    from torchstrata.autograd import cpu_layouts

    full = (2, 3, 4, 5)
    others = [
        torch.randn(full),
        torch.randn(2, 4, 5, 3).permute(0, 3, 1, 2),
        torch.randn(3, 4, 5),
        torch.randn(1, 3, 1, 5),
        torch.randn(2, 3, 4, 10)[..., ::2],
        torch.randn(5).expand(full),
    ]
    checked = 0
    for order in itertools.permutations(range(4)):
        inverse = [order.index(i) for i in range(4)]
        base = torch.randn([full[i] for i in order]).permute(*inverse)
        for other in others:
            for a, b in ((base, other), (other, base)):
                assert cpu_layouts._iterator_strides([a, b]) == torch.add(a, b).stride()
                checked += 1
    assert checked == 24 * len(others) * 2
