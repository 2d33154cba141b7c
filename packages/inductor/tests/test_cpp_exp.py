"""The C++ backend's float exp (``ts_exp_f32`` in ``cpp_exprs.PRELUDE``): inline, so that
omp simd loops vectorise it, and within about one ulp of the true value everywhere."""

from __future__ import annotations

import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim

#: Inputs where exp's result changes kind: overflow to inf (88.7228...), the smallest
#: normal (-87.336...), rounding to the smallest subnormal or to zero (-103.972...).
EDGES = [88.7228, 88.7229, -87.3365, -87.3366, -103.28, -103.9720, -103.9721, -104.0, -104.5]
SPECIALS = [float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1e-30, -1e-30, 1e30, -1e30]


def _exp_graph(n: int, dtype: torch.dtype):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((n,), dtype))
    return b.build([b.call(prim("exp"), x)])


def _ulps(got: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """|got - exact| in units of float32's spacing at ``exact`` (2**-149 below 2**-126)."""
    floor = torch.floor(torch.log2(exact.clamp_min(2.0**-126)))
    spacing = torch.where(
        exact >= 2.0**-126, torch.exp2(floor - 23), torch.full_like(exact, 2.0**-149)
    )
    return (got.double() - exact).abs() / spacing


def test_float_exp_is_within_about_one_ulp(ind):
    sweep = torch.linspace(-110.0, 100.0, 1_000_003)
    x = torch.cat([sweep, torch.tensor(EDGES + SPECIALS)])
    compiled = ind.compile(_exp_graph(x.numel(), torch.float32), "cpp")
    body = ind.kernel_code(compiled.kernels[0].source)
    assert "ts_exp_f32(" in body and "std::exp(" not in body
    (got,) = compiled(x)
    want = torch.exp(x)
    exact = torch.exp(x.double())
    # the kinds of result agree with torch's: NaN, infinities and zeros in the same places
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    assert torch.equal(got == 0, want == 0)
    finite = torch.isfinite(want) & (want != 0)
    assert _ulps(got[finite], exact[finite]).max().item() <= 1.5


def test_double_exp_is_the_library_one(ind):
    x = torch.linspace(-700.0, 700.0, 10_001, dtype=torch.float64)
    compiled = ind.compile(_exp_graph(x.numel(), torch.float64), "cpp")
    body = ind.kernel_code(compiled.kernels[0].source)
    assert "std::exp(" in body and "ts_exp_f32" not in body
    (got,) = compiled(x)
    torch.testing.assert_close(got, torch.exp(x), rtol=1e-15, atol=0.0)
