"""The exps inside online softmax statistics may flush results below 2**-126 to zero
(triton_printer.statistic_exp); the exps whose results reach an output may not."""

from __future__ import annotations

import re

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta
from torchstrata.inductor.codegen.triton.generate import generate_triton
from torchstrata.inductor.codegen.triton.ptx import kernel_ptx
from torchstrata.inductor.codegen.triton.tuning import Config

pytest.importorskip("triton")


def test_statistics_flush_and_the_output_does_not(ind, tmp_path):
    kernel = ind.only_kernel(ind.softmax_rows(4, 65536))
    source = generate_triton(kernel, interpret=False, persistent=False, group=8)
    statistics, output = source.split("rindex = (rnumel - 1) // RBLOCK * RBLOCK")
    assert "tl.math.exp2((val_amax - safe_amax[:, :, None]) * 1.4426950408889634)" in statistics
    assert "tl.exp(" not in statistics and "tl.exp(" in output
    ptx = kernel_ptx(kernel, Config(1, 16384, 32, False, group=8), cache_dir=str(tmp_path))
    loops = [m.start() for m in re.finditer(r"^\$L__BB\w+:", ptx, re.MULTILINE)]
    first, second = ptx[loops[0] : loops[1]], ptx[loops[1] :]
    assert "ex2.approx.ftz.f32" in first and "ex2.approx.f32" not in first
    assert "ex2.approx.f32" in second  # the output's exp keeps results below 2**-126


def test_float64_statistics_keep_tl_exp(ind):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 65536), torch.float64))
    kernel = ind.only_kernel(b.build([ind.softmax_last(b, x)]))
    source = generate_triton(kernel, interpret=False, persistent=False, group=8)
    assert "tl.math.exp2" not in source


@pytest.mark.parametrize("length", [1000, 65536])
def test_rows_whose_terms_underflow_match_the_reference(ind, codegen, length):
    # terms of exp(x - max) from 1 down to far below float32's smallest normal (2**-126 is
    # about exp(-87.3)): the sums, and every output, match the reference
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, length, generator=gen) * 40.0
    x[0, :: max(1, length // 10)] = -1.0e4
    x[1] = torch.linspace(-95.0, 0.0, length)
    x[2, 0] = 50.0
    compiled = ind.check(ind.softmax_rows(3, length, torch.float32), codegen, inputs=[x])
    (out,) = compiled(x)
    exact = torch.softmax(x.double(), -1)
    torch.testing.assert_close(out.double(), exact, atol=1e-30, rtol=1e-5)
