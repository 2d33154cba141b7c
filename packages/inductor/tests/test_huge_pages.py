"""Large CPU kernel stores are advised onto transparent huge pages before their kernel
writes them (``launch/huge_pages.py``, decision 0233); smaller ones are not."""

from __future__ import annotations

import sys

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, aten, interpret, prim, random_inputs
from torchstrata.inductor.launch.huge_pages import (
    HUGE_PAGE_MIN_BYTES,
    advise_huge_pages,
    wants_huge_pages,
)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise is Linux's")


def _exp_graph(numel: int):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((numel,), torch.float32))
    return b.build([b.call(prim("exp"), b.call(prim("add"), x, 1.0))])


@linux_only
def test_a_large_store_is_advised_and_right(ind) -> None:
    """A 32 MB result is advised before its kernel runs; its values are the
    interpreter's."""
    numel = HUGE_PAGE_MIN_BYTES // 4
    compiled = ind.check(_exp_graph(numel), "cpp")
    source = compiled.launcher_source
    assert "_advise_huge_pages(" in source
    assert source.index("_advise_huge_pages(") < source.index(".data_ptr()")


def test_a_small_store_is_not_advised(ind) -> None:
    compiled = ind.compile(_exp_graph(4096), "cpp")
    assert "_advise_huge_pages" not in compiled.launcher_source


@linux_only
def test_advice_keeps_the_values_and_skips_other_devices() -> None:
    """Advice on a buffer (and on a view into it) changes nothing it holds; only CPU
    buffers of the threshold and more are advised."""
    t = torch.arange(HUGE_PAGE_MIN_BYTES // 4, dtype=torch.float32)
    expected = t.clone()
    advise_huge_pages(t)
    advise_huge_pages(t[5:17])
    torch.testing.assert_close(t, expected, rtol=0, atol=0)
    assert wants_huge_pages(HUGE_PAGE_MIN_BYTES, torch.device("cpu"))
    assert not wants_huge_pages(HUGE_PAGE_MIN_BYTES - 1, torch.device("cpu"))
    assert not wants_huge_pages(HUGE_PAGE_MIN_BYTES, torch.device("cuda"))


@linux_only
def test_a_graph_with_advice_is_packaged(ind) -> None:
    """The advice is no global of the launcher's own: the compiled graph is still saved
    (the compiled-graph cache keeps only graphs whose globals it can record)."""
    compiled = ind.compile(_exp_graph(HUGE_PAGE_MIN_BYTES // 4), "cpp")
    assert compiled.package is not None


@linux_only
def test_a_large_matmul_result_is_allocated_advised(ind) -> None:
    """A 32 MB ``mm`` result is allocated by the launcher, advised, and passed as
    ``out=``; a small one is ATen's own; both give the interpreter's values."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((1024, 8), torch.float32))
    w = b.input("w", TensorMeta((8, HUGE_PAGE_MIN_BYTES // 4 // 1024), torch.float32))
    small = b.input("small", TensorMeta((8, 16), torch.float32))
    big = b.call(aten("mm.default"), x, w)
    little = b.call(aten("mm.default"), x, small)
    graph = b.build([b.call(prim("exp"), big), b.call(prim("exp"), little)])
    compiled = ind.check(graph, "cpp", rtol=1e-5, atol=1e-5)
    source = compiled.launcher_source
    assert "_advise_huge_pages(buf_mm)" in source and "_call_with_out(" in source
    assert "_advise_huge_pages(buf_mm_1)" not in source
    # operands that require grad, under grad mode: ATen refuses out= there unless the
    # launcher turns recording off
    args = [t.requires_grad_() for t in random_inputs(graph)]
    expected = interpret(graph, *(t.detach() for t in args))
    for got, want in zip(compiled(*args), expected, strict=True):
        torch.testing.assert_close(got.detach(), want, rtol=1e-5, atol=1e-5)
