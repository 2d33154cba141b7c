"""Row tiles (``row_tiles``): pointwise kernels with per-row work are walked as rows, the
row's work done once per row outside the loop; checked against the reference on every
backend, including odd, broadcast and size-one shapes, and in sm_90 PTX."""

from __future__ import annotations

import re

import pytest
import torch

from torchstrata.core import Graph, GraphBuilder, InductorOptions, Level, TensorMeta, prim
from torchstrata.inductor.codegen.triton.backend import TritonBackend
from torchstrata.inductor.codegen.triton.generate import generate_triton
from torchstrata.inductor.codegen.triton.ptx import kernel_ptx
from torchstrata.inductor.codegen.triton.row_tiles import ROW_TILE_MIN, as_row_kernel
from torchstrata.inductor.codegen.triton.tuning import Config

pytest.importorskip("triton")


def ce_backward(shape: tuple[int, ...]) -> Graph:
    """Cross-entropy's backward: ``(exp(x - lse) - onehot(target)) * scale`` rounded to
    bf16, with the row's ``lse`` and ``target`` and a 0-d ``scale``."""
    b = GraphBuilder(Level.PRIMS)
    rows, n = shape[:-1], shape[-1]
    lead = tuple(range(len(rows)))
    x = b.input("x", TensorMeta(shape, torch.bfloat16))
    lse = b.input("lse", TensorMeta(rows, torch.float32))
    target = b.input("target", TensorMeta(rows, torch.int64))
    scale = b.input("scale", TensorMeta((), torch.float32))
    xf = b.call(prim("convert_element_type"), x, torch.float32)
    shifted = b.call(prim("sub"), xf, b.call(prim("broadcast_in_dim"), lse, shape, lead))
    iota = b.call(prim("iota"), n, 0, 1, torch.int64, torch.device("cpu"))
    hit = b.call(
        prim("eq"),
        b.call(prim("broadcast_in_dim"), iota, shape, (len(rows),)),
        b.call(prim("broadcast_in_dim"), target, shape, lead),
    )
    onehot = b.call(prim("convert_element_type"), hit, torch.float32)
    grad = b.call(prim("sub"), b.call(prim("exp"), shifted), onehot)
    scaled = b.call(prim("mul"), grad, b.call(prim("broadcast_in_dim"), scale, shape, ()))
    return b.build([b.call(prim("convert_element_type"), scaled, torch.bfloat16)])


def bias_add(shape: tuple[int, int]) -> Graph:
    """``x + bias``: nothing per row."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(shape, torch.float32))
    bias = b.input("bias", TensorMeta(shape[-1:], torch.float32))
    return b.build([b.call(prim("add"), x, b.call(prim("broadcast_in_dim"), bias, shape, (1,)))])


def test_per_row_work_leaves_the_loop(ind):
    flat = ind.only_kernel(ce_backward((8, 32000)))
    kernel = as_row_kernel(flat)
    assert kernel is not None and flat.row_shape == (8, 32000) and not flat.red_shape
    assert (kernel.row_shape, kernel.red_shape, kernel.reductions) == ((8,), (32000,), ())
    assert not kernel.row_stores and len(kernel.full_stores) == 1
    source = generate_triton(kernel, interpret=False, persistent=False)
    head, loop = source.split("for rstep in range(0, rnumel, RBLOCK):")
    assert "buf_lse" in head and "buf_target" in head and "buf_scale" in head
    assert "buf_lse" not in loop and "buf_target" not in loop and "buf_x" in loop


def test_the_loop_has_no_row_index_arithmetic(ind, tmp_path):
    # flat, each element finds its row with a division by 32000 (a multiply-high); as rows,
    # the loop over a row loads, computes and stores only
    flat = ind.only_kernel(ce_backward((8, 32000)))
    kernel = as_row_kernel(flat)
    assert kernel is not None
    flat_ptx = kernel_ptx(flat, Config(1024, 1, 4, True), cache_dir=str(tmp_path))
    assert re.search(r"mul\.hi|div\.|rem\.", flat_ptx)
    ptx = kernel_ptx(kernel, Config(1, 4096, 8, False), cache_dir=str(tmp_path))
    loops = [m.start() for m in re.finditer(r"^\$L__BB\w+:", ptx, re.MULTILINE)]
    assert loops
    body = ptx[loops[0] :]
    assert not re.search(r"mul\.hi|div\.|rem\.|lg2", body)
    assert re.search(r"ld\.global(\.[\w:]+)*\.v4\.b32", body)  # 128-bit bf16 loads


def test_short_rows_and_kernels_without_per_row_loads_stay_flat(ind, monkeypatch):
    assert as_row_kernel(ind.only_kernel(ce_backward((8, ROW_TILE_MIN // 2)))) is None
    # a row of 2049 would leave half of a 4096 tile masked off; 8193 is looped over
    assert as_row_kernel(ind.only_kernel(ce_backward((8, 2049)))) is None
    assert as_row_kernel(ind.only_kernel(ce_backward((8, 8193)))) is not None
    assert as_row_kernel(ind.only_kernel(bias_add((8, 4096)))) is None
    softmax = ind.only_kernel(ind.softmax_rows(8, 4096))
    assert as_row_kernel(softmax) is None  # already a row kernel
    kernel = ind.only_kernel(ce_backward((8, 4096)))
    assert as_row_kernel(kernel) is not None
    on = TritonBackend(interpret=False).generate(kernel, clusters=False)[0]
    off_options = InductorOptions(row_tiles=False)
    off = TritonBackend(interpret=False, options=off_options).generate(kernel, clusters=False)[0]
    assert on == as_row_kernel(kernel) and off is kernel


@pytest.mark.parametrize("shape", [(3, 4000), (1, 3, 4096), (2, 3, 2048), (5, 1, 8195)])
def test_row_tiles_match_the_reference(ind, codegen, shape):
    graph = ce_backward(shape)
    assert as_row_kernel(ind.only_kernel(graph)) is not None
    rows = shape[:-1]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen).bfloat16()
    lse = torch.randn(rows, generator=gen) + 8.0
    target = torch.randint(0, shape[-1], rows, generator=gen)
    scale = torch.tensor(0.25)
    compiled = ind.check(graph, codegen, inputs=[x, lse, target, scale], atol=1e-2, rtol=1e-2)
    (out,) = compiled(x, lse, target, scale)
    # against float64: bf16 rounding of the same values, one unit in the last place
    exact = (x.double() - lse.double()[..., None]).exp()
    exact -= torch.nn.functional.one_hot(target, shape[-1]).double()
    torch.testing.assert_close(out.double(), exact * 0.25, atol=1e-3, rtol=1e-2)
