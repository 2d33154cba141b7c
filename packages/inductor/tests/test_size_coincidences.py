"""A size argument's name is not given to a value that equals it by coincidence where that
changes the source at that size only (decisions 0360, 0361): a per-element factor ``0.5``
in rows of 5 (``2 / (n - 1)``) stays a literal, and a column reduction whose rows equal
its length names its reduced stride by its rows, as at every other length. Each graph over
lengths straddling the coincidence is one Triton module, interpreter and GPU text, and
equal to the reference interpreter at each."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.triton import backend as triton_backend

pytest.importorskip("triton")


def _halved_rows(length: int):
    """``x * 0.5 - sum(x, 1)`` over ``[4, length]``: a row kernel whose per-element factor
    ``0.5`` is ``2 / (length - 1)`` at length 5."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, length), torch.float32))
    total = b.call(prim("broadcast_in_dim"), b.call(prim("sum"), x, (1,)), (4, length), (0,))
    return b.build([b.call(prim("sub"), b.call(prim("mul"), x, 0.5), total)])


def _column_sum(length: int, width: int = 48):
    """``sum(x * 2, 0)`` over ``[length, width]``: a column reduction of ``width`` rows
    (columns), each ``length`` long; at ``length == width`` its reduced stride equals both."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((length, width), torch.float32))
    return b.build([b.call(prim("sum"), b.call(prim("mul"), x, 2.0), (0,))])


def _sources(ind, graph, where: str) -> tuple[str, ...]:
    compiled = ind.check(graph, where, rtol=1e-5, atol=1e-5)
    return tuple(k.source for k in compiled.kernels if k.backend == "triton")


def _gpu_texts(monkeypatch, ind, graph) -> tuple[str, ...]:
    """The GPU module texts of ``graph``'s Triton kernels (generated from the kernels the
    interpreter backend plans, no GPU needed), after checking it under the interpreter."""
    built: list[str] = []
    real = triton_backend.TritonBackend.build

    def build(self, kernel, options):
        _, _, generated = triton_backend.TritonBackend(interpret=False).generate(kernel, False)
        built.extend(source for _, source in generated)
        return real(self, kernel, options)

    with monkeypatch.context() as patch:
        patch.setattr(triton_backend.TritonBackend, "build", build)
        _sources(ind, graph, "triton")
    return tuple(built)


def _where(where: str) -> None:
    if where == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")


@pytest.mark.parametrize("where", ["triton", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_per_element_half_is_one_module_at_a_length_of_5(ind, where):
    """Odd lengths (one divisor class, no row a power of two): 5 printed ``0.5`` as
    ``2 / (rnumel - 1)``, an unbiased variance's backward factor, a module of its own."""
    _where(where)
    sources = {_sources(ind, _halved_rows(length), where) for length in (3, 5, 7, 9, 11)}
    assert len(sources) == 1, f"{len(sources)} modules"
    ((source,),) = sources
    assert "0.5" in source and "- 1)" not in source


def test_the_gpu_text_of_a_per_element_half_is_one_module(ind, monkeypatch):
    texts = {_gpu_texts(monkeypatch, ind, _halved_rows(length)) for length in (3, 5, 7, 9)}
    assert len(texts) == 1, f"{len(texts)} GPU texts"


@pytest.mark.parametrize("where", ["triton", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_column_sum_as_long_as_its_rows_is_one_module(ind, where):
    """Column sums of 48 columns over 40, 47, 48, 49 and 56 rows: at 48 the reduced stride
    48 was spelled ``rnumel*r0`` (the length), elsewhere ``xnumel*r0`` (the columns)."""
    _where(where)
    lengths = (41, 47, 48, 49, 57) if where == "triton" else (48, 80, 112)
    sources = {_sources(ind, _column_sum(length), where) for length in lengths}
    assert len(sources) == 1, f"{len(sources)} modules over {lengths}"
    ((source,),) = sources
    assert "xnumel*r0" in source and "rnumel*r0" not in source


def test_the_gpu_text_of_a_column_sum_as_long_as_its_rows_is_one_module(ind, monkeypatch):
    """48, 80 and 112 rows: one divisor class (16), none a power of two (no dropped mask)."""
    texts = {_gpu_texts(monkeypatch, ind, _column_sum(length)) for length in (48, 80, 112)}
    assert len(texts) == 1, f"{len(texts)} GPU texts"
    ((text,),) = texts
    assert "xnumel*r0" in text and "rnumel*r0" not in text


def test_a_row_kernel_as_long_as_its_rows_names_its_row_stride_by_the_length(ind):
    """The other way round: a row kernel over ``[48, 48]`` reads its row stride as the row
    length, as over ``[40, 48]``."""
    sources = {_sources(ind, _halved_rows_of(rows), "triton") for rows in (40, 48)}
    assert len(sources) == 1
    ((source,),) = sources
    assert "rnumel*x0" in source


def _halved_rows_of(rows: int):
    """``x * 0.5 - sum(x, 1)`` over ``[rows, 48]``."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, 48), torch.float32))
    total = b.call(prim("broadcast_in_dim"), b.call(prim("sum"), x, (1,)), (rows, 48), (0,))
    return b.build([b.call(prim("sub"), b.call(prim("mul"), x, 0.5), total)])
