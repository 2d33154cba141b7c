"""Write-backs done in place (``in_place.py``): a functional update of an input whose
result the caller writes back into that input (the contract's ``write_backs``) runs as
the in-place op."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import (
    CompileOptions,
    GraphBuilder,
    GraphContract,
    Level,
    TensorMeta,
    WriteBack,
    aten,
    prim,
)
from torchstrata.inductor import compile_graph


def _cache_update(read_old_after: bool = False):
    """``new = index_copy(cache, 0, pos, row * 2)``; outputs ``sum(new)`` and ``new`` (the
    write-back of input 0); optionally also ``cache + 1`` computed after the update."""
    b = GraphBuilder(Level.PRIMS)
    cache = b.input("cache", TensorMeta((6, 4), torch.float32))
    pos = b.input("pos", TensorMeta((1,), torch.int64))
    row = b.input("row", TensorMeta((1, 4), torch.float32))
    new = b.call(aten("index_copy.default"), cache, 0, pos, b.call(prim("mul"), row, 2.0))
    outputs = [b.call(prim("sum"), new, (0, 1)), new]
    if read_old_after:
        outputs.append(b.call(prim("add"), cache, 1.0))
    return b.build(outputs)


def _inputs():
    return torch.randn(6, 4), torch.tensor([2]), torch.randn(1, 4)


def _options(ind, codegen):
    return CompileOptions(codegen=ind.backend(codegen), cache_dir=ind.cache_dir)


def _contract(write_backs):
    """What the runtime tells the codegen: ``{output: input}`` copies after the call."""
    return GraphContract(write_backs=[WriteBack(j, i) for j, i in (write_backs or {}).items()])


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_a_written_back_update_runs_in_place(ind, codegen, monkeypatch):
    if codegen == "triton":
        pytest.importorskip("triton")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    graph = _cache_update()
    compiled = compile_graph(graph, "cpu", _options(ind, codegen), contract=_contract({1: 0}))
    assert ", in place" in compiled.launcher_source
    cache, pos, row = _inputs()
    want = cache.clone().index_copy_(0, pos, row * 2)
    total, new = compiled(cache, pos, row)
    assert new is cache  # updated in place: the write-back copies it onto itself
    torch.testing.assert_close(cache, want)
    torch.testing.assert_close(total, want.sum())


@pytest.mark.parametrize(
    ("write_backs", "read_old_after"),
    [(None, False), ({1: 1}, False), ({0: 0}, False), ({1: 0}, True)],
    ids=["no write-backs", "another input", "another output", "old value read after"],
)
def test_an_update_stays_functional_otherwise(ind, write_backs, read_old_after):
    graph = _cache_update(read_old_after)
    compiled = compile_graph(graph, "cpu", _options(ind, "cpp"), contract=_contract(write_backs))
    assert "in place" not in compiled.launcher_source
    cache, pos, row = _inputs()
    before = cache.clone()
    results = compiled(cache, pos, row)
    torch.testing.assert_close(cache, before)  # the input is left as it was
    want = before.clone().index_copy_(0, pos, row * 2)
    torch.testing.assert_close(results[1], want)
    if read_old_after:
        torch.testing.assert_close(results[2], before + 1)
