"""Column partial sums fused into the row kernel before them (``partials.py``): a norm's
backward computes its input gradient and its weight/bias gradients' partial sums in one
kernel; checked under Triton's interpreter against the reference interpreter."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, InductorOptions, Level, TensorMeta, aten, prim
from torchstrata.inductor.codegen.triton.tuning import candidate_configs
from torchstrata.inductor.ir.indexing import Index, Var, fold_div_mod

pytest.importorskip("triton")


def _builders(b: GraphBuilder, rows: int, n: int):
    """``wide(value, dims)``: broadcast to ``[rows, n]``; ``f32(value)``: to float32."""

    def wide(value, dims):
        return b.call(prim("broadcast_in_dim"), value, (rows, n), dims)

    def f32(value):
        return b.call(prim("convert_element_type"), value, torch.float32)

    return wide, f32


def _norm_backward(rows: int, n: int, dtype: torch.dtype = torch.float32):
    """LayerNorm's backward from prims: ``dx`` (two row sums), ``dw = sum(dy * xhat, 0)``
    and ``db = sum(dy, 0)``; ``split_sums`` makes the column sums two levels."""
    b = GraphBuilder(Level.PRIMS)
    dy = b.input("dy", TensorMeta((rows, n), dtype))
    x = b.input("x", TensorMeta((rows, n), dtype))
    mean = b.input("mean", TensorMeta((rows,), torch.float32))
    rstd = b.input("rstd", TensorMeta((rows,), torch.float32))
    w = b.input("w", TensorMeta((n,), dtype))
    wide, f32 = _builders(b, rows, n)

    g32 = f32(dy)
    xhat = b.call(prim("mul"), b.call(prim("sub"), f32(x), wide(mean, (0,))), wide(rstd, (0,)))
    gw = b.call(prim("mul"), g32, wide(f32(w), (1,)))
    s1 = wide(b.call(prim("sum"), gw, (1,)), (0,))
    s2 = wide(b.call(prim("sum"), b.call(prim("mul"), gw, xhat), (1,)), (0,))
    inner = b.call(
        prim("sub"),
        b.call(prim("sub"), b.call(prim("mul"), gw, float(n)), s1),
        b.call(prim("mul"), xhat, s2),
    )
    dx = b.call(prim("mul"), b.call(prim("div"), wide(rstd, (0,)), float(n)), inner)
    dw = b.call(prim("sum"), b.call(prim("mul"), g32, xhat), (0,))
    db = b.call(prim("sum"), g32, (0,))
    cast = [b.call(prim("convert_element_type"), v, dtype) for v in (dx, dw, db)]
    return b.build(cast)


def _rms_backward(
    rows: int, n: int, dtype: torch.dtype, dx_reads_dw: bool = False, extern: bool = False
):
    """RMSNorm's backward with ``dw`` built first: the scheduler plans its partial sums,
    then their sum, then the ``dx`` row kernel. With ``dx_reads_dw``, ``dx`` also reads
    ``dw`` (so it cannot move before the sum of the partials); with ``extern``, an ATen
    matmul runs between them (a step nothing moves past)."""
    b = GraphBuilder(Level.PRIMS)
    dy = b.input("dy", TensorMeta((rows, n), dtype))
    x = b.input("x", TensorMeta((rows, n), dtype))
    rstd = b.input("rstd", TensorMeta((rows,), torch.float32))
    w = b.input("w", TensorMeta((n,), dtype))
    wide, f32 = _builders(b, rows, n)

    g32 = f32(dy)
    xhat = b.call(prim("mul"), f32(x), wide(rstd, (0,)))
    dw = b.call(prim("sum"), b.call(prim("mul"), g32, xhat), (0,))
    outputs = []
    if extern:
        m = b.input("m", TensorMeta((8, 8), torch.float32))
        outputs.append(b.call(aten("mm.default"), m, m))
    scale = dw if dx_reads_dw else f32(w)
    gw = b.call(prim("mul"), g32, wide(scale, (1,)))
    s2 = wide(b.call(prim("sum"), b.call(prim("mul"), gw, xhat), (1,)), (0,))
    inner = b.call(prim("sub"), gw, b.call(prim("mul"), xhat, b.call(prim("div"), s2, float(n))))
    dx = b.call(prim("mul"), wide(rstd, (0,)), inner)
    casts = [b.call(prim("convert_element_type"), v, dtype) for v in (dx, dw)]
    return b.build(casts + outputs)


def _loads_in_loop(source: str, buffer: str) -> int:
    """Loads of ``buffer`` in the loop over a program's rows (a pipelined loop also loads
    the first block before it: still one load per element)."""
    return source[source.index("for xstep") :].count(f"tl.load({buffer} ")


def test_a_quotient_and_remainder_fold_back_into_the_row():
    x0, x1, r0 = Var("x0", 8), Var("x1", 2048), Var("r0", 96)
    row = Index.of(x0) * 2048 + Index.of(x1)
    rebuilt = row.floordiv(64) * (64 * 96) + row.mod(64) * 96 + Index.of(r0) + 7
    assert rebuilt != row * 96 + Index.of(r0) + 7  # as built: quotient and remainder atoms
    assert fold_div_mod(rebuilt) == row * 96 + Index.of(r0) + 7
    unrelated = row.floordiv(64) * 5 + row.mod(64)  # not d * quotient + remainder: kept
    assert fold_div_mod(unrelated) == unrelated


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("enabled", [True, False])
@pytest.mark.parametrize("where", ["triton", "cuda"])
def test_norm_backward_partials_join_the_row_kernel(ind, monkeypatch, dtype, enabled, where):
    if where == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    graph = _norm_backward(2048, 96, dtype)
    tolerance = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {}
    options = InductorOptions(partials=enabled)
    compiled = ind.check(graph, where, seeds=(0, 1), inductor=options, **tolerance)
    # dx with the partial sums of dw and db, then the sums of the partials; apart: three
    assert len(compiled.kernels) == (2 if enabled else 3)
    fused = [k for k in compiled.kernels if "part_" in k.source]
    assert len(fused) == int(enabled)
    if enabled:
        assert _loads_in_loop(fused[0].source, "buf_dy") == 1  # dy read once for all three
        assert _loads_in_loop(fused[0].source, "buf_x") == 1


@pytest.mark.parametrize("where", ["triton", "cuda"])
def test_partials_planned_before_their_row_kernel_join_it(ind, where):
    if where == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    compiled = ind.check(_rms_backward(2048, 96, torch.bfloat16), where, seeds=(0, 1))
    assert len(compiled.kernels) == 2  # dx with dw's partial sums, then their sum
    (fused,) = [k for k in compiled.kernels if "part_" in k.source]
    assert _loads_in_loop(fused.source, "buf_dy") == 1
    # dx reading dw cannot move before dw's sum: three kernels, still right
    compiled = ind.check(
        _rms_backward(2048, 96, torch.float32, dx_reads_dw=True), where, atol=1e-4, rtol=1e-4
    )
    assert len(compiled.kernels) == 3
    assert not [k for k in compiled.kernels if "part_" in k.source]
    # an extern step between them: nothing moves past it
    compiled = ind.check(
        _rms_backward(2048, 96, torch.float32, extern=True), where, atol=1e-4, rtol=1e-4
    )
    assert compiled.eager_ops == ("aten.mm.default",)
    assert len(compiled.kernels) == 3


def test_partials_configs_tile_the_chunk():
    from torchstrata.inductor.codegen.triton.partials import fuse_partials
    from torchstrata.inductor.codegen.triton.printer import supports
    from torchstrata.inductor.codegen.triton.split_sums import split_long_sums
    from torchstrata.inductor.schedule.lowering import lower_graph
    from torchstrata.inductor.schedule.plan import plan_graph

    graph = split_long_sums(_norm_backward(4096, 1000))
    lowered = lower_graph(graph, lambda name, dtype: supports(name, dtype, interpret=False))
    steps = fuse_partials(plan_graph(graph, lowered).steps)
    (kernel,) = [s for s in steps if getattr(s, "partials", None) is not None]
    assert kernel.partials.chunk * kernel.partials.programs == 4096
    configs = candidate_configs(kernel, interpret=False)
    assert configs and all(c.persistent and c.rblock == 1024 for c in configs)
    assert all(kernel.partials.chunk % c.xblock == 0 for c in configs)
    assert {c.grid(kernel.rows) for c in configs} == {(kernel.partials.programs,)}


def test_partials_configs_for_rows_too_short_for_a_vector_per_thread():
    """Rows of 4: partials tiles of at most 16 elements, fewer than 4 warps' vectors. No
    configuration was left, and building such a kernel for the GPU raised IndexError
    (the H200 OpInfo gradient sweep: a group norm's backward over 6 channels)."""
    from torchstrata.inductor.codegen.triton.partials import fuse_partials
    from torchstrata.inductor.codegen.triton.printer import supports
    from torchstrata.inductor.codegen.triton.split_sums import split_long_sums
    from torchstrata.inductor.schedule.lowering import lower_graph
    from torchstrata.inductor.schedule.plan import plan_graph

    graph = split_long_sums(_norm_backward(4096, 4))
    lowered = lower_graph(graph, lambda name, dtype: supports(name, dtype, interpret=False))
    steps = fuse_partials(plan_graph(graph, lowered).steps)
    kernels = [s for s in steps if getattr(s, "partials", None) is not None]
    assert kernels
    for kernel in kernels:
        configs = candidate_configs(kernel, interpret=False)
        assert configs and all(c.persistent for c in configs)
        assert all(kernel.partials.chunk % c.xblock == 0 for c in configs)
