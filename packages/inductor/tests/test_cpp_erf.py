"""``erf`` of floats in C++ kernels is the inline rational function of
``codegen/cpp/erf.py`` (decision 0291): the SIMD loops of GELU's forward and backward
vectorise it without libmvec, and its values stay within 5e-7 of float64's ``erf``
(relative, near 0 too) with eager's special values."""

from __future__ import annotations

import ctypes
import math

import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.cpp.build import build_kernel
from torchstrata.inductor.codegen.cpp.erf import ERF_PRELUDE
from torchstrata.inductor.codegen.cpp.exprs import PRELUDE


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


def _with_select_clamps(prelude: str) -> str:
    """``prelude``'s erf, renamed ``erf_selects``, with its clamps as the NaN-propagating
    selects (``ts_min``/``ts_max``) they were before decision 0518."""
    edits = (
        ("ts_erf_f32(float v)", "erf_selects(float v)"),
        (
            "  const float low = v < -4.0f ? -4.0f : v;\n  const float x = low > 4.0f ? 4.0f : low;\n",
            "  const float x = ts_min<float>(ts_max<float>(v, -4.0f), 4.0f);\n",
        ),
        (
            "  const float y = x * p / q;\n  const float y_low = y < -1.0f ? -1.0f : y;\n"
            "  return y_low > 1.0f ? 1.0f : y_low;\n",
            "  return ts_min<float>(ts_max<float>(x * p / q, -1.0f), 1.0f);\n",
        ),
    )
    for old, new in edits:
        assert old in prelude, old
        prelude = prelude.replace(old, new)
    return prelude


_SELECT_CLAMPS = (
    _with_select_clamps(ERF_PRELUDE)
    + r"""
extern "C" void both(const float* __restrict__ x, float* __restrict__ ours,
                     float* __restrict__ selects, const int64_t n) {
  #pragma omp simd
  for (int64_t i = 0; i < n; ++i) { ours[i] = ts_erf_f32(x[i]); selects[i] = erf_selects(x[i]); }
}
"""
)


def test_erf_clamps_are_conditionals_with_the_bits_of_nan_propagating_selects(tmp_path):
    """Decision 0518: the clamps are ``v < lo ? lo : v`` (a NaN compares false and passes
    through), one min or max instruction each; every 97th float bit pattern (all
    exponents, NaN payloads, infinities, subnormals) and the boundaries give the bits
    that ``ts_max``/``ts_min`` gave, in a SIMD loop."""
    assert "ts_max" not in ERF_PRELUDE and "ts_min" not in ERF_PRELUDE
    source = f"{PRELUDE}{ERF_PRELUDE}{_SELECT_CLAMPS}"
    kernel = build_kernel(source, "both", 4, tmp_path).fn
    kernel.argtypes = [*kernel.argtypes[:3], ctypes.c_int64]
    patterns = torch.arange(0, 2**32, 97, dtype=torch.int64).to(torch.int32)
    bounds = torch.tensor([4.0, -4.0, 1.0, -1.0, 3.9999998, -0.0, 0.0, float("inf")])
    x = torch.cat([patterns.view(torch.float32), bounds, -bounds])
    ours, selects = torch.empty_like(x), torch.empty_like(x)
    kernel(x.data_ptr(), ours.data_ptr(), selects.data_ptr(), x.numel())
    assert torch.equal(ours.view(torch.int32), selects.view(torch.int32))
