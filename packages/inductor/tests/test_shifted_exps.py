"""A row's exp(v - max(v)) shifted into the hardware exp's normal range (shifted_exps.py):
no subnormal fix-up per element, subnormal results kept."""

from __future__ import annotations

import re

import pytest
import torch

from torchstrata.core import GraphBuilder, InductorOptions, Level, TensorMeta, prim
from torchstrata.inductor.codegen.reciprocals import hoist_reciprocals
from torchstrata.inductor.codegen.triton.backend import TritonBackend
from torchstrata.inductor.codegen.triton.generate import generate_triton
from torchstrata.inductor.codegen.triton.ptx import kernel_ptx
from torchstrata.inductor.codegen.triton.shifted_exps import SCALE, shift_row_exps
from torchstrata.inductor.codegen.triton.tuning import Config
from torchstrata.inductor.ir.exprs import Constant, Op, walk

pytest.importorskip("triton")


def _ops(kernel, name: str) -> list[Op]:
    return [
        node
        for store in kernel.full_stores
        for node in walk(store.value)
        if isinstance(node, Op) and node.name == name
    ]


def _weighted_softmax(ind, rows: int, n: int, dtype: torch.dtype = torch.float32):
    """``exp(x - max(x)) * w``: a row exp times a value that is not its sum's reciprocal."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, n), dtype))
    w = b.input("w", TensorMeta((rows, n), dtype))
    peak = b.call(prim("broadcast_in_dim"), b.call(prim("amax"), x, (1,)), (rows, n), (0,))
    e = b.call(prim("exp"), b.call(prim("sub"), x, peak))
    return b.build([b.call(prim("mul"), e, w)])


def test_the_output_exp_is_shifted_and_its_scale_joins_the_reciprocal(ind, tmp_path):
    kernel = shift_row_exps(hoist_reciprocals(ind.only_kernel(ind.softmax_rows(4, 65536))))
    assert not _ops(kernel, "exp") and len(_ops(kernel, "exp2")) == 1
    # the scale multiplies the row's reciprocal, not each element
    (inverse,) = [op for op in _ops(kernel, "mul") if Constant(SCALE, torch.float32) in op.args]
    assert inverse.args[0].name == "div"
    source = generate_triton(kernel, interpret=False, persistent=False, group=8)
    output = source.split("for rstep in range(0, rnumel, RBLOCK):")[1]
    assert "tl.exp(" not in output and "tl.exp2(" in output and "5.96" not in output
    ptx = kernel_ptx(kernel, Config(1, 16384, 32, False, group=8), cache_dir=str(tmp_path))
    loops = [m.start() for m in re.finditer(r"^\$L__BB\w+:", ptx, re.MULTILINE)]
    second = ptx[loops[1] :]
    assert "ex2.approx.ftz.f32" in second and "ex2.approx.f32" not in second


def test_exps_that_stay(ind, monkeypatch):
    # exp(x - m) with a loaded m: nothing bounds the exponent
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 1000), torch.float32))
    m = b.input("m", TensorMeta((4,), torch.float32))
    shifted = b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), m, (4, 1000), (0,)))
    e = b.call(prim("exp"), shifted)
    total = b.call(prim("broadcast_in_dim"), b.call(prim("sum"), e, (1,)), (4, 1000), (0,))
    loaded = ind.only_kernel(b.build([b.call(prim("div"), e, total)]))
    assert shift_row_exps(loaded) is loaded
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 1000), torch.float64))
    double = ind.only_kernel(b.build([ind.softmax_last(b, x)]))
    assert shift_row_exps(double) is double
    # another multiplier keeps its own scale per element
    weighted = shift_row_exps(ind.only_kernel(_weighted_softmax(ind, 4, 1000)))
    assert any(Constant(SCALE, torch.float32) in op.args for op in _ops(weighted, "mul"))
    assert len(_ops(weighted, "exp2")) == 1
    kernel = ind.only_kernel(ind.softmax_rows(4, 1000))
    assert shift_row_exps(kernel) is not kernel
    off = TritonBackend(interpret=False, options=InductorOptions(shifted_exps=False))
    on_sources = [s for _, s in TritonBackend(interpret=False).generate(kernel, False)[2]]
    off_sources = [s for _, s in off.generate(kernel, False)[2]]
    assert on_sources != off_sources  # the shift is what differs: the kernel is the same


@pytest.mark.parametrize("length", [1000, 65536])
def test_subnormal_results_survive(ind, codegen, length):
    # outputs from 1 down through float32's subnormals (2**-126 .. 2**-149) and below
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, length, generator=gen)
    x[0] = torch.linspace(-110.0, 0.0, length)
    x[1] = torch.linspace(-104.0, -80.0, length)
    x[1, 0] = 0.0
    x[2] *= 30.0
    compiled = ind.check(ind.softmax_rows(4, length, torch.float32), codegen, inputs=[x])
    (out,) = compiled(x)
    exact = torch.softmax(x.double(), -1)
    assert (exact[:2] < 2.0**-126).any() and (exact[:2] > 2.0**-148).any()
    torch.testing.assert_close(out.double(), exact, atol=2.0**-148, rtol=1e-5)
    # against float32 eager: its exps round to subnormals before the multiplication, so
    # the products differ by a few subnormal units at most (a flushed exp: up to 2**-120)
    ind.check(
        _weighted_softmax(ind, 4, length), codegen, inputs=[x, x.abs()], atol=2.0**-140, rtol=1e-5
    )
