"""Looped rows compute a sum and its centred sum of squares in one Welford pass
(LayerNorm, ``var``): one read of the row fewer, and robust for large means."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.triton import backend as triton_backend
from torchstrata.inductor.codegen.triton import generate as triton_codegen
from torchstrata.inductor.codegen.triton.generate import generate_triton
from torchstrata.inductor.codegen.triton.printer import supports
from torchstrata.inductor.codegen.triton.tuning import Config
from torchstrata.inductor.ir.exprs import Constant, Load, Op, ReduceRef
from torchstrata.inductor.ir.indexing import Index, Var
from torchstrata.inductor.ir.kernel import Kernel, ReductionSpec
from torchstrata.inductor.ir.online import variance_pairs
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph


def _norm_graph(rows: int, length: int, divisor: float | None = None):
    """``(x - mean) * rsqrt(var + eps) * w`` over rows of ``length`` from prims; the
    centring divides the sum by ``divisor`` (default: the row length, a true mean)."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, length), torch.float32))
    w = b.input("w", TensorMeta((length,), torch.float32))
    mean = b.call(prim("div"), b.call(prim("sum"), x, (1,)), divisor or float(length))
    centred = b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), mean, (rows, length), (0,)))
    var = b.call(
        prim("div"), b.call(prim("sum"), b.call(prim("mul"), centred, centred), (1,)), float(length)
    )
    rstd = b.call(prim("rsqrt"), b.call(prim("add"), var, 1e-5))
    out = b.call(prim("mul"), centred, b.call(prim("broadcast_in_dim"), rstd, (rows, length), (0,)))
    out = b.call(prim("mul"), out, b.call(prim("broadcast_in_dim"), w, (rows, length), (1,)))
    return b.build([out, var])


def _reference(x, w, divisor=None, dtype=torch.float64):
    """The graph's values computed in ``dtype`` (two passes over the row)."""
    xd, wd = x.to(dtype), w.to(dtype)
    centred = xd - xd.sum(1, keepdim=True) / (divisor or x.shape[1])
    var = (centred * centred).sum(1) / x.shape[1]
    return centred * torch.rsqrt(var[:, None] + 1e-5) * wd, var


@pytest.fixture
def looped(monkeypatch):
    """Make the Triton backend loop over rows in tiles of ``rblock``."""

    def use(rblock: int, welford_min: int = 0) -> None:
        monkeypatch.setattr(triton_codegen, "WELFORD_MIN_LENGTH", welford_min)
        config = Config(2, rblock, 4, persistent=False)
        monkeypatch.setattr(triton_backend, "candidate_configs", lambda kernel, *_, **__: [config])

    return use


@pytest.mark.parametrize(
    ("rows", "length", "rblock"),
    [(5, 4096, 1024), (5, 3001, 512), (3, 700, 1024), (1, 1, 16)],
)
def test_looped_norm_makes_one_pass_for_both_moments(ind, looped, rows, length, rblock):
    looped(rblock)
    compiled = ind.compile(_norm_graph(rows, length), "triton")
    # a large mean over a small spread: the naive sum-of-squares form loses every digit
    x = 1e4 + 0.01 * torch.randn(rows, length, generator=torch.Generator().manual_seed(0))
    w = torch.randn(length, generator=torch.Generator().manual_seed(1))
    out, var = compiled(x, w)
    want_out, want_var = _reference(x, w)
    torch.testing.assert_close(var.double(), want_var, rtol=1e-3, atol=1e-12)
    # The float32 mean itself is off by up to half its ulp (5e-4 at 1e4, 5% of the
    # spread): the output can be no closer than eager's float32 two-pass result.
    eager_error = (_reference(x, w, dtype=torch.float32)[0].double() - want_out).abs().max()
    assert (out.double() - want_out).abs().max() <= 2 * eager_error + 1e-4
    (kernel,) = compiled.kernels
    assert "_ts_welford_combine, keep_dims" in kernel.source
    # one loop for both moments, one for the output (was three loops)
    assert kernel.source.count("for r") == 2


def test_looped_norm_special_values(ind, looped):
    looped(512)
    compiled = ind.compile(_norm_graph(4, 3001), "triton")
    x = torch.randn(4, 3001)
    x[1, 2000] = float("nan")
    x[2, 10] = float("inf")
    x[3] = 7.0  # constant row: zero variance
    out, var = compiled(x, torch.ones(3001))
    assert torch.isnan(var[1]) and torch.isnan(out[1]).all()
    assert torch.isnan(var[2])
    assert var[3] == 0 and (out[3] == 0).all()
    assert torch.isfinite(out[0]).all()


def test_another_divisor_keeps_its_own_pass(ind, looped):
    # centred on sum / (n + 1), not the mean: not a second moment, so no Welford pass
    looped(512)
    compiled = ind.compile(_norm_graph(3, 3001, divisor=3002.0), "triton")
    x, w = torch.randn(3, 3001), torch.randn(3001)
    out, var = compiled(x, w)
    want_out, want_var = _reference(x, w, divisor=3002.0)
    torch.testing.assert_close(var.double(), want_var, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(out.double(), want_out, rtol=1e-4, atol=1e-4)
    assert "_ts_welford_combine, keep_dims" not in compiled.kernels[0].source
    assert compiled.kernels[0].source.count("for r") == 3


def test_variance_pairs_need_the_whole_next_phase():
    f32 = torch.float32
    v = Load("x", Index.of(Var("r0", 64)), f32)
    total = ReductionSpec("s", "sum", v, f32)
    centred = Op("sub", (v, Op("div", (ReduceRef("s", f32), Constant(64.0, f32)), f32)), f32)
    square = ReductionSpec("q", "sum", Op("mul", (centred, centred), f32), f32)
    assert variance_pairs([total, square], 64) == {"q": total}
    assert variance_pairs([total, square], 65) == {}
    other = ReductionSpec("m", "amax", centred, f32)  # reads the sum in the same phase
    assert variance_pairs([total, square, other], 64) == {}


def test_short_rows_keep_two_loops(ind, looped):
    # below WELFORD_MIN_LENGTH the second read of a row hits L2: plain passes are faster
    looped(512, welford_min=4096)
    compiled = ind.check(_norm_graph(3, 3001), "triton", rtol=1e-4, atol=1e-4)
    assert compiled.kernels[0].source.count("for r") == 3


def test_rows_reread_evict_but_weights_stay():
    # GPU source (the interpreter gets no hints): the last loop reads the row for the
    # last time, so it is evicted first; the weight is read by every row, so it stays.
    graph = _norm_graph(2, 4096)
    lowered = lower_graph(graph, lambda name, dtype: supports(name, dtype, interpret=False))
    (kernel,) = [step for step in plan_graph(graph, lowered).steps if isinstance(step, Kernel)]
    source = generate_triton(kernel, interpret=False, persistent=False)
    last_loop = source[source.rindex("for r") :]
    loads = [line for line in last_loop.splitlines() if "tl.load(" in line]
    assert any("buf_x" in line for line in loads) and any("buf_w" in line for line in loads)
    for line in loads:
        assert ("evict_first" if "buf_x" in line else "evict_last") in line, line
