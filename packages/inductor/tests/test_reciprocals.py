"""Divisions by per-row values generated as multiplications by a reciprocal computed once
per row (reciprocals.py)."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, InductorOptions, Level, TensorMeta, prim
from torchstrata.inductor.codegen.backend import CppBackend
from torchstrata.inductor.codegen.cpp.generate import generate_cpp
from torchstrata.inductor.codegen.reciprocals import hoist_reciprocals
from torchstrata.inductor.codegen.triton.backend import TritonBackend
from torchstrata.inductor.codegen.triton.generate import generate_triton
from torchstrata.inductor.ir.exprs import Constant, Op, walk


def _divisions(kernel) -> list[Op]:
    return [
        node
        for store in kernel.full_stores
        for node in walk(store.value)
        if isinstance(node, Op) and node.name == "div"
    ]


def _softmax(ind, rows: int, length: int, dtype: torch.dtype):
    """Softmax computed in ``dtype`` (no conversions)."""
    b = GraphBuilder(Level.PRIMS)
    return b.build([ind.softmax_last(b, b.input("x", TensorMeta((rows, length), dtype)))])


def _divide_by_elements(rows: int, length: int):
    """``x / y`` with ``y`` varying along the row, then a row sum: nothing per row to hoist."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, length), torch.float32))
    y = b.input("y", TensorMeta((rows, length), torch.float32))
    ratio = b.call(prim("div"), x, y)
    total = b.call(prim("sum"), ratio, (1,))
    spread = b.call(prim("broadcast_in_dim"), total, (rows, length), (0,))
    return b.build([b.call(prim("div"), ratio, spread)])


def test_the_row_divisor_is_inverted_once_per_row(ind):
    kernel = ind.only_kernel(ind.softmax_rows(4, 65536))
    (division,) = _divisions(kernel)
    hoisted = hoist_reciprocals(kernel)
    (inverse,) = _divisions(hoisted)  # only 1 / sum is left
    assert inverse.args == (Constant(1.0, torch.float32), division.args[1])
    source = generate_triton(hoisted, interpret=False, persistent=False, group=8)
    head, loop = source.split("for rstep in range(0, rnumel, RBLOCK):")
    assert " / " in head and " / " not in loop and " * " in loop
    single = hoist_reciprocals(ind.only_kernel(ind.softmax_rows(4, 1000, torch.float32)))
    body = ind.serial_rows(ind.kernel_code(generate_cpp(single)))
    # the one float division; the blocked sums' whole blocks are `(red_len / 256) * 256` (0285)
    float_divisions = body.count(" / ") - body.count("red_len / ")
    assert float_divisions == 1 and "static_cast<float>(1.0) / " in body


def test_divisions_that_stay(ind, monkeypatch):
    # float64 keeps its correctly rounded quotient
    double = ind.only_kernel(_softmax(ind, 4, 1000, torch.float64))
    assert hoist_reciprocals(double) is double
    # a divisor that varies along the row; the row sum's division is still inverted
    mixed = hoist_reciprocals(ind.only_kernel(_divide_by_elements(4, 1000)))
    numerators = [division.args[0] for division in _divisions(mixed)]
    assert Constant(1.0, torch.float32) in numerators  # 1 / total
    assert any(not isinstance(numerator, Constant) for numerator in numerators)  # x / y
    kernel = ind.only_kernel(ind.softmax_rows(4, 1000))
    off = InductorOptions(reciprocals=False)
    assert TritonBackend(interpret=False, options=off).generate(kernel, False)[0] is kernel
    assert TritonBackend(interpret=False).generate(kernel, False)[0] is not kernel
    assert CppBackend(off).generate(kernel) != CppBackend().generate(kernel)


@pytest.mark.parametrize("shape", [(3, 1000), (1, 1), (5, 8193), (0, 7)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reciprocals_match_the_reference(ind, codegen, shape, dtype):
    rtol = 1.3e-6 if dtype is torch.float32 else 1.6e-2
    ind.check(ind.softmax_rows(*shape, dtype=dtype), codegen, seeds=(0, 1), atol=1e-6, rtol=rtol)
    if codegen == "cpp" and dtype is torch.float32:
        ind.check(_softmax(ind, *shape, torch.float64), codegen, atol=0.0, rtol=1e-15)
