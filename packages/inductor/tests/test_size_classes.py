"""Over 16 lengths straddling power-of-two boundaries, a kernel's Triton sources differ
only by what a size's class decides by design (decisions 0250, 0362): the divisor hints
(``rnumel = (rnumel // 8) * 8``) and the masks dropped where every launch's block divides
the rows or the row (``row_count.rows_generic`` takes both out). Nothing else of a size
reaches the text: no literal, and no name chosen by a coincidence of two sizes (0360,
0361). Checked on the GPU text (generated without a GPU) and under the interpreter, whose
results equal the reference interpreter at every length."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.triton.backend import TritonBackend
from torchstrata.inductor.codegen.triton.row_count import rows_generic

pytest.importorskip("triton")

#: Around 16, 32, 64 and 128, the width 48 of ``_column_sum`` and 5 (``0.5 == 2 / (5 - 1)``).
LENGTHS = (5, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65, 96, 127, 129)


def _halved_rows(length: int):
    """``x * 0.5 - sum(x, 1)`` over ``[4, length]``: a row kernel."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, length), torch.float32))
    total = b.call(prim("broadcast_in_dim"), b.call(prim("sum"), x, (1,)), (4, length), (0,))
    return b.build([b.call(prim("sub"), b.call(prim("mul"), x, 0.5), total)])


def _column_sum(length: int):
    """``sum(x * 2, 0)`` over ``[length, 48]``: a column reduction."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((length, 48), torch.float32))
    return b.build([b.call(prim("sum"), b.call(prim("mul"), x, 2.0), (0,))])


def _mean_rows(length: int):
    """``x - mean(x, 1)`` over ``[length, 48]``: rows by the length, a count ``/ 48``."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((length, 48), torch.float32))
    mean = b.call(prim("div"), b.call(prim("sum"), x, (1,)), 48.0)
    return b.build(
        [b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), mean, (length, 48), (0,)))]
    )


def _column_mean(length: int):
    """``sum(x, 0) / (length - 1)`` over ``[length, 48]``: a column reduction's count read
    from ``rnumel`` also where the length equals the rows (48), named ``xnumel`` there."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((length, 48), torch.float32))
    return b.build([b.call(prim("div"), b.call(prim("sum"), x, (0,)), float(length - 1))])


def _scaled(length: int):
    """``x * 3 + 1`` over ``[length, 24]``: a pointwise kernel of ``24 * length`` elements."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((length, 24), torch.float32))
    return b.build([b.call(prim("add"), b.call(prim("mul"), x, 3.0), 1.0)])


def _softmax(length: int):
    """``softmax(x, 1)`` over ``[3, length]``: a row kernel with a maximum and a sum."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((3, length), torch.float32))

    def wide(value):
        return b.call(prim("broadcast_in_dim"), value, (3, length), (0,))

    exps = b.call(prim("exp"), b.call(prim("sub"), x, wide(b.call(prim("amax"), x, (1,)))))
    return b.build([b.call(prim("div"), exps, wide(b.call(prim("sum"), exps, (1,))))])


KINDS = {
    "row": _halved_rows,
    "column": _column_sum,
    "column_mean": _column_mean,
    "mean": _mean_rows,
    "pointwise": _scaled,
    "softmax": _softmax,
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_gpu_texts_differ_only_by_divisor_hints_and_masks(ind, kind):
    texts, generic = set(), set()
    for length in LENGTHS:
        kernel = ind.only_kernel(KINDS[kind](length))
        _, _, generated = TritonBackend(interpret=False).generate(kernel, False)
        texts.add(tuple(source for _, source in generated))
        generic.add(tuple(rows_generic(source) for _, source in generated))
    assert len(generic) == 1, f"{len(texts)} GPU texts, {len(generic)} once hints and masks are out"


@pytest.mark.parametrize("where", ["triton", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("kind", ["row", "column"])
def test_modules_differ_only_by_masks_and_equal_the_reference(ind, kind, where):
    if where == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    generic = set()
    for length in LENGTHS:
        compiled = ind.check(KINDS[kind](length), where, rtol=1e-5, atol=1e-5)
        sources = [k.source for k in compiled.kernels if k.backend == "triton"]
        generic.add(tuple(rows_generic(source) for source in sources))
    assert len(generic) == 1, f"{len(generic)} modules once hints and masks are out"
