"""Prims are real-valued: every meta refuses complex tensors, dtypes and numbers; complex
numbers are graph constants in the text form; ``touches_complex`` finds the nodes that
must stay ATen calls."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import (
    GraphBuilder,
    Level,
    PrimError,
    TensorMeta,
    all_prims,
    aten,
    get_prim,
    parse,
    touches_complex,
)

C64 = TensorMeta((3, 4), torch.complex64)
F32 = TensorMeta((3, 4), torch.float32)


@pytest.mark.parametrize("prim", all_prims(), ids=lambda prim: prim.name)
def test_every_prim_refuses_a_complex_tensor(prim):
    with pytest.raises(PrimError, match="complex"):
        prim.meta(C64, C64)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("abs", (C64,)),  # once gave complex64 for |z|
        ("mul", (F32, 2j)),
        ("convert_element_type", (F32, torch.complex64)),
        ("convert_element_type", (C64, torch.float32)),
        ("full", ((3,), 1.0, torch.complex64, torch.device("cpu"))),
        ("full", ((3,), 1j, torch.float32, torch.device("cpu"))),
        ("cat", ([F32, C64], 0)),
        ("sum", (C64, [0])),
        ("reshape", (C64, [12])),
    ],
)
def test_complex_operands_numbers_and_dtypes_are_refused(name, args):
    with pytest.raises(PrimError, match="prims are real-valued"):
        get_prim(name).meta(*args)


def test_real_operands_still_pass():
    assert get_prim("abs").meta(F32).dtype == torch.float32
    assert get_prim("mul").meta(F32, 2.0).dtype == torch.float32


def test_complex_constants_print_and_parse_back():
    builder = GraphBuilder(Level.ATEN)
    z = builder.input("z", C64)
    scaled = builder.call(aten("mul.Tensor"), z, complex(1.5, -2.0))
    shifted = builder.call(aten("add.Tensor"), scaled, complex(float("inf"), 0.0))
    graph = builder.build([shifted])
    text = str(graph)
    assert "complex(1.5, -2.0)" in text and "complex(inf, 0.0)" in text
    assert str(parse(text)) == text
    assert parse(text).nodes[0].args[1] == complex(1.5, -2.0)


def test_touches_complex_sees_operands_results_numbers_and_dtypes():
    builder = GraphBuilder(Level.ATEN)
    z, x = builder.input("z", C64), builder.input("x", F32)
    magnitude = builder.call(aten("abs.default"), z)  # complex in, float32 out
    real_sum = builder.call(aten("add.Tensor"), x, magnitude)
    rotated = builder.call(aten("mul.Tensor"), x, 1j)  # a complex number
    widened = builder.call(aten("_to_copy.default"), x, dtype=torch.complex64)
    assert magnitude.tensor_meta.dtype == torch.float32
    assert [touches_complex(n) for n in (magnitude, real_sum, rotated, widened)] == [
        True,
        False,
        True,
        True,
    ]
