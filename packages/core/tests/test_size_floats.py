"""``core.SizeFloat``: floats computed from the sizes of a lowering made for many sizes
(an attention's ``1 / sqrt(d)``, decision 0500). Generated code computes them from the
symbols; reads of their value refuse the lowering; the text form prints and parses them."""

from __future__ import annotations

import math

import pytest
import sympy  # type: ignore[import-untyped]
import torch
from torch.utils._sympy.functions import FloatPow, FloatTrueDiv, OpaqueUnaryFn_sqrt, ToFloat

from torchstrata.core import (
    PythonPrinter,
    SizeFloat,
    SizeGuards,
    SizeRead,
    SourcePrinter,
    SymbolicSizes,
    is_size_float,
    parse,
    size_printer,
)
from torchstrata.core.graph import format_value
from torchstrata.core.size_floats import size_float

S0 = sympy.Symbol("s0", integer=True, positive=True)
S1 = sympy.Symbol("s1", integer=True, positive=True)


def _scale(hint: int = 16) -> tuple[SizeGuards, SizeFloat]:
    guards = SizeGuards({"s0": hint, "s1": 5})
    made = size_float(OpaqueUnaryFn_sqrt(ToFloat(S0)), guards)
    assert isinstance(made, SizeFloat)
    return guards, made


def _python(value: SizeFloat, **sizes: int) -> float:
    """``value`` computed by its Python source (what a launcher runs) at ``sizes``."""
    return float(eval(repr(value), {"math": math}, sizes))  # the printer's own output


def test_its_hint_is_the_value_at_the_sizes_lowered():
    _, scale = _scale(24)
    assert scale.hint == math.sqrt(24) and is_size_float(scale)


@pytest.mark.parametrize(
    ("expr", "python"),
    [
        (OpaqueUnaryFn_sqrt(ToFloat(S0)), lambda n, m: math.sqrt(n)),
        (FloatPow(ToFloat(S0), -0.5), lambda n, m: n**-0.5),
        (FloatTrueDiv(1.0, ToFloat(S0)), lambda n, m: 1.0 / n),
        (FloatTrueDiv(1.0, OpaqueUnaryFn_sqrt(ToFloat(S0))), lambda n, m: 1 / math.sqrt(n)),
        (0.5 * ToFloat(S0 * S1), lambda n, m: float(n * m) * 0.5),
    ],
    ids=["sqrt", "pow", "reciprocal", "inverse_sqrt", "half_product"],
)
def test_python_source_computes_what_python_computes_at_every_size(expr, python):
    guards = SizeGuards({"s0": 16, "s1": 3})
    made = size_float(expr, guards)
    for n in range(2, 300):
        for m in (2, 7):
            assert _python(made, s0=n, s1=m) == python(n, m), (repr(made), n, m)
    assert guards.refused == [] and guards.conditions == []


def test_arithmetic_gives_floats_of_the_same_sizes():
    guards, scale = _scale()
    inverse = 1 / scale
    assert isinstance(inverse, SizeFloat) and inverse.hint == 1 / math.sqrt(16)
    assert _python(inverse, s0=24) == 1 / math.sqrt(24)
    doubled = scale * guards.symbol("s1")
    assert _python(doubled, s0=9, s1=4) == math.sqrt(9) * 4
    assert guards.refused == []


def test_floats_of_one_expression_are_equal_and_hash_alike():
    guards, scale = _scale()
    again = size_float(OpaqueUnaryFn_sqrt(ToFloat(S0)), guards)
    assert scale == again and hash(scale) == hash(again)
    assert scale != guards.symbol("s0")  # a size is an integer: never this float


@pytest.mark.parametrize(
    "read",
    [float, bool, int, lambda v: v == 4.0, lambda v: v < 1.0, str, lambda v: f"{v:.3f}"],
    ids=["float", "bool", "int", "equal", "less", "str_no_printer", "format"],
)
def test_reading_its_value_refuses_the_lowering(read):
    guards, scale = _scale()
    with pytest.raises(SizeRead):
        read(scale)
    assert guards.refused


def test_a_printer_without_float_spellings_refuses_it():
    guards, scale = _scale()

    class SizesOnly(PythonPrinter):
        spell_float = SourcePrinter.spell_float  # a printer of integer sizes only

    with size_printer(SizesOnly()), pytest.raises(SizeRead):
        str(scale)
    assert guards.refused


def test_a_float_without_symbols_is_a_float():
    guards = SizeGuards({"s0": 4})
    assert size_float(OpaqueUnaryFn_sqrt(ToFloat(sympy.Integer(16))), guards) == 4.0


def test_a_float_of_sizes_prints_and_parses_back():
    guards, scale = _scale()
    text = format_value(1 / scale)
    listing = (
        "graph prims {\n  symbol s0, hint 16\n"
        "  %x: f32[s0] = input\n"
        f"  %y: f32[s0] = prims.mul(%x, {text})\n  return %y\n}}"
    )
    parsed = parse(listing, SymbolicSizes({}))
    assert type(parsed.outputs[0].args[1]) is torch.SymFloat
    assert str(parsed) == listing
    assert guards.refused == []


@pytest.mark.parametrize(
    "written",
    [
        "FloatPow(ToFloat(s0), -0.5)",
        "OpaqueUnaryFn_sqrt(ToFloat(s0))",
        "FloatTrueDiv(1.0, ToFloat(s0))",
    ],
)
def test_dynamo_floats_of_a_width_parse_back(written):
    listing = (
        "graph torch {\n  symbol s0, hint 16\n"
        "  %x: f32[s0] = input\n"
        f"  %y: f32[s0] = operator.mul(%x, {written})\n  return %y\n}}"
    )
    assert str(parse(listing, SymbolicSizes({}))) == listing
