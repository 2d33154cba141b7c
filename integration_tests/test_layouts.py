"""Results come back in eager's memory layout, through the whole compiler.

Elementwise results follow their inputs' layout (channels-last in, channels-last out; a
transposed input gives a transposed result), ``contiguous()`` and ``memory_format=``
copies take the layout asked for, and a channels-last block trains as eager does."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchstrata.runtime as tsr
from torchstrata.runtime import TorchstrataFallbackWarning


def _channels_last() -> torch.Tensor:
    return torch.randn(2, 8, 5, 5).to(memory_format=torch.channels_last)


def _transposed_3d() -> torch.Tensor:
    return torch.randn(2, 6, 5).mT


BIAS = torch.randn(8, 1, 1)
CHANNELS_LAST_WEIGHT = torch.randn(4, 8, 3, 3).to(memory_format=torch.channels_last)
TRANSPOSED_WEIGHT_1D = torch.randn(4, 3, 2).mT.contiguous().mT
DIVISOR = torch.tensor(0.7)
CASES = {
    "relu": (lambda x: F.relu(x) * 2, _channels_last),
    "bias": (lambda x: F.relu(x + BIAS), _channels_last),
    "where": (lambda x: torch.where(x > 0, x, x * 0.1), _channels_last),
    "cast": (lambda x: x.to(torch.float16) * 2, _channels_last),
    "mixed layouts": (lambda x: x + x.contiguous(), _channels_last),
    "zeros_like": (lambda x: torch.zeros_like(x) + x, _channels_last),
    "keepdim sum": (lambda x: x.sum(1, keepdim=True) * x, _channels_last),
    # in training the trace spells softmax out; its result keeps the fused kernel's layout
    "softmax over channels": (lambda x: torch.softmax(x, 1), _channels_last),
    "log_softmax over channels": (lambda x: torch.log_softmax(x, 1), _channels_last),
    "batch norm": (
        lambda x: F.batch_norm(x, torch.zeros(8), torch.ones(8), training=False),
        _channels_last,
    ),
    "contiguous": (lambda x: (x * 2).contiguous(), _channels_last),
    "to channels-last": (
        lambda x: (x.contiguous() * 2).to(memory_format=torch.channels_last),
        _channels_last,
    ),
    "clone contiguous": (
        lambda x: torch.clone(x * 2, memory_format=torch.contiguous_format),
        _channels_last,
    ),
    "transposed": (lambda t: F.gelu(t) + 1, lambda: torch.randn(6, 4).t()),
    "transposed contiguous": (lambda t: (t * 2).t().contiguous(), lambda: torch.randn(6, 4)),
    # results a rule builds as views (stack: a cat reshaped): copied into eager's layout
    "stack": (lambda t: torch.stack([t * 2, t + 1]), lambda: torch.randn(6, 4).t()),
    "kron": (lambda t: torch.kron(t, t + 1), lambda: torch.randn(6, 4).t()),
    # broadcast_in_dim (unsqueeze, keepdim reductions) gives new size-one dimensions
    # unsqueeze's strides: a stride 0 there once reached users and ATen kernels (CUDA's
    # avg_pool2d_backward read such operands wrong)
    "keepdim": (lambda x: x.sum(1, keepdim=True), lambda: torch.randn(4, 6)),
    "new dims": (lambda x: (x + 1)[:, None, :, None], lambda: torch.randn(4, 6)),
    "unsqueezes": (lambda x: (x * 2).unsqueeze(1).unsqueeze(0), lambda: torch.randn(4, 6)),
    "unsqueezed softmax": (lambda x: torch.softmax(x, 0).unsqueeze(-1), lambda: torch.randn(4, 6)),
    # padding and resizing channels-last images (what a UNet does between convolutions)
    "constant pad": (lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), _channels_last),
    "interpolate nearest": (lambda x: F.interpolate(x, scale_factor=2), _channels_last),
    "interpolate bilinear": (
        lambda x: F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=False),
        _channels_last,
    ),
    # 1-D pools and area interpolation run a 2-D kernel on an unsqueezed input and squeeze
    # its result: a view of an intermediate, laid out as eager lays out the view
    "avg_pool1d": (lambda x: F.avg_pool1d(x, 2), _transposed_3d),
    "adaptive_avg_pool1d": (lambda x: F.adaptive_avg_pool1d(x, 2), _transposed_3d),
    "adaptive_max_pool1d": (lambda x: F.adaptive_max_pool1d(x, 2), _transposed_3d),
    "interpolate area": (lambda x: F.interpolate(x, size=3, mode="area"), _transposed_3d),
    "tensorinv": (lambda x: torch.linalg.tensorinv(x, ind=2), lambda: torch.randn(4, 3, 12)),
    # CPU graphs are traced on meta tensors, whose kernels lay these out as CUDA does (or
    # row-major); the CPU kernels keep the input's suggested memory format
    "reflect pad": (lambda x: F.pad(x, (1, 2, 0, 1), mode="reflect"), _channels_last),
    "negative replicate pad": (
        lambda x: F.pad(x, (-1, 1, 1, -2), mode="replicate"),
        _channels_last,
    ),
    # one row left: the inductor picks it with a one-hot sum (gather_as_reduction), whose
    # nodes were laid out row-major, and the output must come back channels-last
    "replicate pad to one row": (
        lambda x: F.pad(x, (8, -1, -1, -3), mode="replicate"),
        _channels_last,
    ),
    "roll": (lambda x: torch.roll(x, 1, 1), _channels_last),
    "roll two dims": (lambda x: torch.roll(x, (1, -1), (2, 3)), _channels_last),
    # ... and batch norm's meta kernel keeps a transposed input's strides, the CPU's not
    "batch norm transposed": (lambda x: F.batch_norm(x, None, None, training=True), _transposed_3d),
    "batch norm eval transposed": (
        lambda x: F.batch_norm(x, torch.zeros(5), torch.ones(5), training=False),
        _transposed_3d,
    ),
    # floor division's meta kernel answers row-major; the CPU's follows the input
    "floor division": (
        lambda t: torch.div(t, DIVISOR, rounding_mode="floor"),
        lambda: torch.randn(6, 4).t(),
    ),
    # a channels-last weight makes a channels-last result on the CPU, batch of one included
    "conv channels-last weight": (
        lambda x: F.conv2d(x, CHANNELS_LAST_WEIGHT),
        lambda: torch.randn(1, 8, 6, 6),
    ),
    "unbatched conv channels-last weight": (
        lambda x: F.conv2d(x, CHANNELS_LAST_WEIGHT),
        lambda: torch.randn(8, 6, 6),
    ),
    "unbatched conv1d transposed weight": (
        lambda x: F.conv1d(x, TRANSPOSED_WEIGHT_1D),
        lambda: torch.randn(3, 7),
    ),
    # a new tensor where the rule returns the input, laid out as eager's
    "roll by 0": (lambda x: torch.roll(x, 0, 1), _transposed_3d),
    # cat or where, not a scatter that ATen lays out row-major
    "slice_scatter": (lambda x: torch.slice_scatter(x, x[:, :, :2] * 2, 2, 1, 3), _channels_last),
    "strided slice_scatter": (
        lambda x: torch.slice_scatter(x, x[:, :2] + 1, 1, 1, 5, 3),
        _transposed_3d,
    ),
    # a prim run by ATen (prims.scatter) returned as a graph output, in ATen's layout
    "index_put": (
        lambda t: torch.index_put(t * 1, (torch.tensor([0, 2]),), torch.tensor(5.0)),
        lambda: torch.randn(6, 4).t(),
    ),
    # pow with a scalar base: the CPU kernel answers row-major, the meta kernel transposed
    "pow scalar base": (lambda t: torch.pow(2.0, t) + 1, lambda: torch.randn(6, 4).t()),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("training", [False, True])
def test_results_have_eagers_strides(name, training):
    f, make = CASES[name]
    x = make().requires_grad_(training)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        got = tsr.compile(f)(x)
    want = f(x)
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()


DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
    ),
]


@pytest.mark.parametrize("device", DEVICES)
def test_a_channels_last_block_trains_as_eager_does(device):
    """On the GPU the trace runs with cuDNN off (for batch norm), where a channels-last
    convolution's result is row-major; cuDNN returns it channels-last. The convolutions
    are traced with cuDNN, so their results keep the layout the run gives them (not a
    copy into row-major after each one)."""
    torch.manual_seed(0)
    block = nn.Sequential(
        nn.Conv2d(8, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
    ).to(device=device, memory_format=torch.channels_last)
    reference = copy.deepcopy(block)
    x = torch.randn(4, 8, 10, 10, device=device).to(memory_format=torch.channels_last)
    x.requires_grad_()
    x_eager = x.detach().clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        out = tsr.compile(block)(x)
        out.relu().sum().backward()
    want = reference(x_eager)
    want.relu().sum().backward()
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
    assert out.stride() == want.stride()
    torch.testing.assert_close(x.grad, x_eager.grad, atol=1e-4, rtol=1e-4)
    assert x.grad.stride() == x_eager.grad.stride()
    for got, expected in zip(block.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, expected.grad, atol=1e-3, rtol=1e-3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_channels_last_bf16_block_keeps_its_layout_on_the_gpu():
    block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
    block = block.eval().cuda().to(torch.bfloat16).to(memory_format=torch.channels_last)
    x = torch.randn(8, 16, 12, 12, device="cuda", dtype=torch.bfloat16)
    x = x.to(memory_format=torch.channels_last)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        got = tsr.compile(block)(x)
        want = block(x)
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    assert got.stride() == want.stride()


def test_a_returned_value_and_its_clone_are_two_tensors():
    """The clone of a fresh value lowers to the value itself; returned beside it, it is
    copied, so an update of one does not show in the other."""

    def f(x):
        y = x * 2
        return y, y.clone(), y.detach()

    x = torch.randn(3)
    y, clone, detached = tsr.compile(f)(x)
    assert y.data_ptr() != clone.data_ptr()
    assert y.data_ptr() == detached.data_ptr()  # a view, as in eager
    y.add_(1)
    torch.testing.assert_close(clone, x * 2)
    torch.testing.assert_close(detached, x * 2 + 1)


@pytest.mark.parametrize("training", [False, True])
def test_a_copy_that_a_rule_lowers_to_its_input_is_a_new_tensor(training):
    """``roll`` by 0 and ``slice_scatter`` of nothing lower to their input; eager returns
    a new tensor, so an update of the result must not show in the input."""
    fns = [
        lambda x: torch.roll(x, 0, 0),
        lambda x: torch.slice_scatter(x, torch.empty(0, 4), 0, 3, 3),
    ]
    for f in fns:
        x = torch.randn(6, 4).requires_grad_(training)
        with warnings.catch_warnings():
            warnings.simplefilter("error", TorchstrataFallbackWarning)
            got = tsr.compile(f)(x)
        assert got.data_ptr() != x.data_ptr()
        torch.testing.assert_close(got, f(x))
        if not training:
            got.add_(1)
            torch.testing.assert_close(got, x + 1)


@pytest.mark.parametrize(
    "f",
    [
        lambda a: torch.zeros_like(a),
        lambda a: torch.ones_like(a),
        lambda a: torch.full_like(a, 3.0),
    ],
    ids=["zeros_like", "ones_like", "full_like"],
)
def test_like_creations_take_their_inputs_layout(f):
    for x in (_channels_last(), torch.randn(6, 4).t()):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # compiled, not run eagerly
            got = tsr.compile(f)(x)
        want = f(x)
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()


#: name -> (function, its input). Gradients pulled with a row-major cotangent (the
#: runtime hands the backward row-major tangents) must come back in eager's layout, and
#: the forward's saved values in the layout the backward was built for (else the runtime
#: copies them before every backward, with a warning).
GRAD_CASES = {
    # binary_cross_entropy_backward is empty_like(input) on the CPU: transposed here
    "binary_cross_entropy": (
        lambda t: F.binary_cross_entropy(t.sigmoid(), torch.full((4, 6), 0.3), reduction="none"),
        lambda: torch.randn(6, 4).t(),
    ),
    # log_sigmoid_forward's buffer (saved for the backward) is row-major on the CPU
    "logsigmoid": (lambda t: F.logsigmoid(t) * 2, lambda: torch.randn(6, 4).t()),
    "logsigmoid channels-last": (lambda x: F.logsigmoid(x) * 2, _channels_last),
    # pointwise backward ops: TensorIterator over (tangent, input) on the CPU
    "hardtanh": (lambda t: F.hardtanh(t) * t, lambda: torch.randn(6, 4).t()),
    "hardswish": (lambda x: F.hardswish(x) + x, _channels_last),
    "elu": (lambda t: F.elu(t) + t.sin(), lambda: torch.randn(6, 4).t()),
    "softplus": (lambda x: F.softplus(x) * x, _channels_last),
    "mse_loss": (
        lambda t: F.mse_loss(t, torch.zeros(4, 6), reduction="none") * t,
        lambda: torch.randn(6, 4).t(),
    ),
    "glu": (lambda x: F.glu(x, 1) + 1, _channels_last),
    "pow scalar base": (lambda t: torch.pow(2.0, t.sin()), lambda: torch.randn(6, 4).t()),
}


@pytest.mark.parametrize("name", list(GRAD_CASES))
def test_gradients_have_eagers_strides(name):
    f, make = GRAD_CASES[name]
    x = make()
    ours, eagers = x.detach().clone().requires_grad_(), x.detach().clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        got = tsr.compile(f)(ours)
        cotangent = torch.randn(got.shape)
        (grad,) = torch.autograd.grad(got, ours, cotangent)
    want = f(eagers)
    (want_grad,) = torch.autograd.grad(want, eagers, cotangent)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad, want_grad)
    assert got.stride() == want.stride()
    assert grad.stride() == want_grad.stride()
