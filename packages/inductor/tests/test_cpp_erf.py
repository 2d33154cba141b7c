"""``erf`` of floats in C++ kernels is the inline rational function of
``codegen/cpp/erf.py`` (decision 0291): the SIMD loops of GELU's forward and backward
vectorise it without libmvec, and its values stay within 5e-7 of float64's ``erf``
(relative, near 0 too) with eager's special values."""

from __future__ import annotations

import math

import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim


def _erf_graph(n: int):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((n,), torch.float32))
    return b.build([b.call(prim("erf"), x)])


def _gelu_graph(rows: int, cols: int):
    """GELU forward and its derivative, as the decomposed GPT MLP computes them."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, cols), torch.float32))
    cdf = b.call(
        prim("mul"),
        b.call(prim("add"), b.call(prim("erf"), b.call(prim("mul"), x, 0.7071067811865476)), 1.0),
        0.5,
    )
    pdf = b.call(
        prim("mul"),
        b.call(prim("exp"), b.call(prim("mul"), b.call(prim("mul"), x, x), -0.5)),
        0.3989422804014327,
    )
    forward = b.call(prim("mul"), x, cdf)
    backward = b.call(prim("add"), cdf, b.call(prim("mul"), x, pdf))
    return b.build([forward, backward])


def test_erf_kernel_calls_the_inline_function_and_vectorises(ind) -> None:
    """The kernel calls ``ts_erf_f32`` (no ``std::erf``, no libmvec declaration of it) and
    GCC reports its SIMD loop vectorised."""
    compiled = ind.compile(_gelu_graph(128, 512), "cpp")
    sources = [kernel.source for kernel in compiled.kernels]
    assert any("ts_erf_f32(" in source for source in sources)
    assert not any("std::erf(" in source or " erff(" in source for source in sources)
    for source in sources:
        ind.assert_simd_loops_vectorised(source)


def test_erf_within_5e7_of_float64_with_eager_specials(ind) -> None:
    """A sweep of [-6, 6] and magnitudes 1e-30..10 of both signs: within 5e-7 of
    float64's ``erf``, absolute and relative; +-0, +-inf and NaN as eager."""
    sweep = torch.linspace(-6, 6, 200_001)
    tiny = torch.logspace(-30, 1, 20_001)
    specials = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 4.0, -4.0])
    x = torch.cat([sweep, tiny, -tiny, specials])
    compiled = ind.compile(_erf_graph(x.numel()), "cpp")
    (got,) = compiled(x)
    reference = torch.special.erf(x.double())
    finite = x.isfinite()
    error = (got.double() - reference)[finite].abs()
    assert error.max().item() <= 5e-7
    assert (error / reference[finite].abs().clamp_min(1e-300)).max().item() <= 5e-7
    assert got[finite].abs().max().item() <= 1.0
    torch.testing.assert_close(got[-7:], torch.erf(specials), equal_nan=True, rtol=0, atol=0)
    assert math.copysign(1.0, got[-6].item()) == -1.0  # erf(-0) is -0


def test_gelu_and_its_derivative_as_eager(ind) -> None:
    """GELU and its derivative over a GPT MLP's activations match eager's fp32 values at
    torch's default float32 tolerances."""
    compiled = ind.compile(_gelu_graph(128, 512), "cpp")
    x = torch.randn(128, 512) * 3
    forward, backward = compiled(x)
    y = x.clone().requires_grad_()
    expected = torch.nn.functional.gelu(y)
    (grad,) = torch.autograd.grad(expected.sum(), y)
    torch.testing.assert_close(forward, expected.detach())
    torch.testing.assert_close(backward, grad)
