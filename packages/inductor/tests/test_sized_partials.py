"""A Triton row kernel hosting column partial sums (``partials.py``) takes its rows, row
length and rows per program as size arguments (decision 0340): a LayerNorm's backward is
one module over row counts whose chunk differs (on a GPU; the interpreter's chunk loop
keeps a literal bound), and equal to the reference interpreter at each."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.triton import backend as triton_backend
from torchstrata.inductor.codegen.triton.split_sums import HOSTED_CHUNK, parts_for

pytest.importorskip("triton")


def _norm_backward(rows: int, n: int = 24, factor: float | None = None):
    """LayerNorm's backward from prims (``dx``, ``dw``, ``db``), as in test_partials.py;
    ``factor``: another constant in place of ``n * gw``'s."""
    b = GraphBuilder(Level.PRIMS)
    dy = b.input("dy", TensorMeta((rows, n), torch.float32))
    x = b.input("x", TensorMeta((rows, n), torch.float32))
    mean = b.input("mean", TensorMeta((rows,), torch.float32))
    rstd = b.input("rstd", TensorMeta((rows,), torch.float32))
    w = b.input("w", TensorMeta((n,), torch.float32))

    def wide(value, dims):
        return b.call(prim("broadcast_in_dim"), value, (rows, n), dims)

    xhat = b.call(prim("mul"), b.call(prim("sub"), x, wide(mean, (0,))), wide(rstd, (0,)))
    gw = b.call(prim("mul"), dy, wide(w, (1,)))
    s1 = wide(b.call(prim("sum"), gw, (1,)), (0,))
    s2 = wide(b.call(prim("sum"), b.call(prim("mul"), gw, xhat), (1,)), (0,))
    inner = b.call(
        prim("sub"),
        b.call(prim("sub"), b.call(prim("mul"), gw, float(n) if factor is None else factor), s1),
        b.call(prim("mul"), xhat, s2),
    )
    dx = b.call(prim("mul"), b.call(prim("div"), wide(rstd, (0,)), float(n)), inner)
    dw = b.call(prim("sum"), b.call(prim("mul"), dy, xhat), (0,))
    db = b.call(prim("sum"), dy, (0,))
    return b.build([dx, dw, db])


def _hosting(compiled) -> str:
    (source,) = [k.source for k in compiled.kernels if "part_" in k.source]
    return source


def _chunk(rows: int) -> int:
    return rows // parts_for(rows, HOSTED_CHUNK)


@pytest.mark.parametrize("where", ["triton", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_hosted_partials_kernel_is_one_module_over_rows(ind, where):
    """2048, 2176 and 2304 rows (chunks of 64); on a GPU 4000 too (chunks of 80)."""
    if where == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    sizes = (2048, 2176, 2304) + ((4000,) if where == "cuda" else ())
    assert {_chunk(rows) for rows in sizes} == ({64, 80} if where == "cuda" else {64})
    sources = {
        _hosting(ind.check(_norm_backward(rows), where, rtol=1e-4, atol=1e-4)) for rows in sizes
    }
    assert len(sources) == 1, f"{len(sources)} modules over {sizes}"
    (source,) = sources
    assert "xp * xchunk" in source and "rmask = rindex < rnumel" in source
    assert "2048" not in source and "< 24" not in source  # nor the rows', nor the row's literal


def test_chunks_other_than_64_rows_are_right(ind):
    """2200 rows (25 programs of 88) and 4000 (50 of 80): chunks that are not 64."""
    for rows in (2200, 4000):
        assert _chunk(rows) not in (1, 64)
        _hosting(ind.check(_norm_backward(rows), "triton", rtol=1e-4, atol=1e-4))


def _gpu_modules(monkeypatch, ind, rows: int, n: int = 24) -> str:
    """The GPU module text of the hosting kernel (generated from the kernel the interpreter
    backend plans, no GPU needed)."""
    built = []
    real = triton_backend.TritonBackend.build

    def build(self, kernel, options):
        if kernel.partials is not None:
            _, _, generated = triton_backend.TritonBackend(interpret=False).generate(kernel, False)
            built.extend(source for _, source in generated)
        return real(self, kernel, options)

    monkeypatch.setattr(triton_backend.TritonBackend, "build", build)
    ind.compile(_norm_backward(rows, n), "triton")
    (source,) = built
    return source


def test_gpu_modules_take_the_chunk_and_keep_the_divisor_hints(ind, monkeypatch):
    """The GPU text over 2048 / 2176 / 4000 rows is one module (chunks 64 and 80); at 2100
    rows (70 a chunk) the hints say 4 divides the rows, 2 the chunk, as the literals did."""
    texts = {_gpu_modules(monkeypatch, ind, rows) for rows in (2048, 2176, 4000)}
    assert len(texts) == 1
    (text,) = texts
    assert "for xstep in range(0, xchunk, XBLOCK):" in text
    odd = _gpu_modules(monkeypatch, ind, 2100)
    assert "xnumel = (xnumel // 4) * 4" in odd and "xchunk = (xchunk // 2) * 2" in odd
    assert "xnumel = (xnumel //" not in text and "xchunk = (xchunk //" not in text


def test_a_factor_that_is_not_the_row_length_stays_a_literal(ind):
    """``n * gw`` and ``rstd / n`` are read from ``rnumel`` (decision 0310's counts); ``25 *
    gw`` over rows of 24 keeps its literal."""
    source = _hosting(ind.check(_norm_backward(2048), "triton", rtol=1e-4, atol=1e-4))
    assert source.count("+ rnumel)") == 2  # ``n * gw`` per element, ``rstd / n`` per row
    graph = _norm_backward(2048, factor=25.0)
    source = _hosting(ind.check(graph, "triton", rtol=1e-4, atol=1e-4))
    assert source.count("+ rnumel)") == 1 and "25.0" in source
