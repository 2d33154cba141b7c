"""Sizes with floor division or modulo print where a language's printer is active
(``core.size_printer``, decision 0407): Python's source floors as sympy does."""

from __future__ import annotations

import itertools

import pytest
import sympy  # type: ignore[import-untyped]
from torch.utils._sympy.functions import CeilToInt, FloorDiv, FloorToInt, IntTrueDiv, PythonMod

from torchstrata.core import SizeGuards, SizeRead, python_source, size_printer


def _sizes() -> tuple[SizeGuards, object, object]:
    guards = SizeGuards({"s0": 7, "s1": 3})
    return guards, guards.symbol("s0"), guards.symbol("s1")


def test_floor_division_prints_only_under_a_printer():
    _, n, _ = _sizes()
    half = n // 2
    with pytest.raises(SizeRead):
        str(half)
    with size_printer(python_source):
        assert str(half) == "(s0 // 2)"
    # repr is Python's source (an index's memo key, a launcher's tuple of sizes)
    assert repr((half, 3)) == "((s0 // 2), 3)"


def test_an_unknown_function_of_a_size_is_still_a_refused_read():
    guards, _, _ = _sizes()
    value = guards.of(sympy.sqrt(sympy.Symbol("s0", integer=True, positive=True)))
    with size_printer(python_source), pytest.raises(SizeRead):
        str(value)
    assert guards.refused


#: expressions whose operands may be negative, in each way a size is made of them
_S0, _S1 = sympy.symbols("s0 s1", integer=True, positive=True)
EXPRESSIONS = [
    sympy.floor((1 - _S0) / _S1),
    sympy.Mod(1 - _S0, _S1),
    FloorDiv(_S1 - _S0 - 3, _S1),
    PythonMod(_S1 - _S0, _S1 + 1),
    sympy.ceiling((_S0 - 5) / 3),
    sympy.Max(1, FloorDiv(_S0, 3)),
    sympy.Min(_S0 - 4, _S1),
    FloorDiv(_S0 * _S0 + 1, 2),
    # ``math.ceil(s0 / 32) * 32`` of a meta function (a CUDA attention's log-sum-exp)
    32 * CeilToInt(IntTrueDiv(_S0, 32)),
    FloorToInt(IntTrueDiv(_S0 - 7, _S1)),
]


@pytest.mark.parametrize("expr", EXPRESSIONS, ids=str)
def test_python_source_computes_the_expression(expr):
    text = python_source(expr)
    for s0, s1 in itertools.product(range(2, 9), range(2, 6)):
        want = int(expr.xreplace({_S0: s0, _S1: s1}))
        assert eval(text, {}, {"s0": s0, "s1": s1}) == want, (text, s0, s1)
