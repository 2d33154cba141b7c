"""A symbolic lowering's sizes (``SizeValue``) in the text form (decision 0494): a prims
graph lowered for many sizes prints its sizes by expression, in the syntax of ``SymInt``
sizes, declares their symbols, parses back to the same text, and printing it records no
condition and refuses nothing (the lowering decides the same printed or not)."""

from __future__ import annotations

import pytest
import sympy  # type: ignore[import-untyped]
from torch.utils._sympy.functions import CeilToInt, FloorToInt, IntTrueDiv

from torchstrata.core import (
    SizeGuards,
    SizeRead,
    SizeValue,
    SymbolicSizes,
    parse,
    sized_graph,
    verify,
)
from torchstrata.core.graph import format_value

# a reshape's size list, a slice's bounds and strides, an iota's length, each of sizes
LISTING = """graph prims {
  symbol s7, hint 5
  symbol s53, hint 9
  %x: f32[s7, s53] = input
  %view: f32[s53, s7] = prims.reshape(%x, [s53, s7])
  %part: f32[s7, s53 - 1]{s53, 1} = prims.slice(%x, [0, 1], [s7, s53], [1, 1])
  %steps: i64[s53 + 3] = prims.iota(s53 + 3, 0, 1, torch.int64, device('cpu'))
  return %view, %part, %steps
}"""

# expressions that are more than a sum of products: a SizeValue's own str would be a
# refused read of them outside a code printer (decision 0407)
EXPRESSIONS = [
    "(s53//2)",
    "((s53 + 1)//2)",
    "Mod(s53, 3)",
    "PythonMod(1 - s53, s53)",
    "Max(0, s53 - 3)",
    "Min(4, s53)",
    "4*((s53//2))",
    "s53**2",
    "s53*s7 + 1",
]


def _lowered(text: str, hints: dict[str, int]):
    """The parsed graph as a symbolic lowering holds it: each size a SizeValue."""
    guards = SizeGuards(hints)
    return sized_graph(parse(text, SymbolicSizes({})), guards), guards


def test_a_lowered_graph_prints_its_sizes_and_parses_back():
    graph, guards = _lowered(LISTING, {"s53": 9, "s7": 5})
    view, part, steps = graph.outputs
    assert all(isinstance(size, SizeValue) for size in view.args[1])
    assert isinstance(steps.args[0], SizeValue) and isinstance(part.args[2][1], SizeValue)
    text = str(graph)
    assert text == LISTING  # the hints are the call's sizes: those declared here
    parsed = parse(text, SymbolicSizes({}))
    assert str(parsed) == text
    verify(parsed)
    assert guards.conditions == [] and guards.refused == []


def test_hints_are_the_sizes_of_the_call_lowered():
    graph, _ = _lowered(LISTING, {"s53": 12, "s7": 3})
    assert "symbol s7, hint 3\n  symbol s53, hint 12\n" in str(graph)


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_any_size_expression_prints_without_a_read_and_parses_back(expression):
    listing = LISTING.replace(
        "  return %view, %part, %steps",
        f"  %scaled: f32[s7, s53] = prims.mul(%x, {expression})\n  return %scaled",
    )
    graph, guards = _lowered(listing, {"s53": 9, "s7": 5})
    (scaled,) = graph.outputs
    assert isinstance(scaled.args[1], SizeValue)
    text = str(graph)
    assert f"prims.mul(%x, {expression})" in text
    assert guards.conditions == [] and guards.refused == []
    assert str(parse(text, SymbolicSizes({}))) == text


def test_a_size_whose_own_str_refuses_prints_in_a_listing_unrefused():
    graph, guards = _lowered(LISTING, {"s53": 9, "s7": 5})
    half = graph.outputs[0].args[1][0] // 2
    with pytest.raises(SizeRead):  # the size's own str: a read outside a code printer
        str(half)
    assert guards.refused  # ... which refuses the lowering (decision 0407)
    fresh, fresh_guards = _lowered(LISTING, {"s53": 9, "s7": 5})
    assert format_value([fresh.outputs[0].args[1][0] // 2]) == "[(s53//2)]"
    assert fresh_guards.refused == [] and fresh_guards.conditions == []


def test_strides_are_compared_by_expression_deciding_nothing():
    # %square's strides (s53, 1) against its contiguous ones (s7, 1): compared as sizes,
    # ``s53 == s7`` would be a decision, recorded as a condition of the lowering
    listing = """graph prims {
  symbol s7, hint 5
  symbol s53, hint 9
  %x: f32[s7, s53] = input
  %square: f32[s7, s7]{s53, 1} = prims.slice(%x, [0, 0], [s7, s7], [1, 1])
  return %square
}"""
    graph, guards = _lowered(listing, {"s53": 9, "s7": 5})
    assert str(graph) == listing
    assert guards.conditions == [] and guards.refused == []


def _made(guards: SizeGuards, which: str):
    """Sizes made by a lowering's arithmetic, or by sympy where the arithmetic simplifies
    (a ceiling division, a modulo of a value that may be negative)."""
    n, m = guards.symbol("s0"), guards.symbol("s1")
    made = {
        "floordiv": lambda: 3 * (n // 2) - m,
        "quotient": lambda: n // m,
        "modulo": lambda: n % m,
        "signed modulo": lambda: SizeValue(sympy.Mod(n.expr - m.expr, 4), 0, guards),
        "ceiling": lambda: SizeValue(sympy.ceiling(n.expr / 4), 0, guards),
        # ``math.ceil(s0 / 4)`` of a meta function (a CUDA attention's padded log-sum-exp)
        "rounded up": lambda: SizeValue(CeilToInt(IntTrueDiv(n.expr, 4)), 0, guards),
        "rounded down": lambda: SizeValue(FloorToInt(IntTrueDiv(n.expr, m.expr)), 0, guards),
        "max": lambda: SizeValue(sympy.Max(n.expr - 3, 0), 0, guards),
        "power": lambda: n * n * m,
    }
    return made[which]()


@pytest.mark.parametrize(
    ("which", "written"),
    [
        ("floordiv", "-s1 + 3*((s0//2))"),
        ("quotient", "(s0//s1)"),
        ("modulo", "Mod(s0, s1)"),
        ("signed modulo", "PythonMod(s0 - s1, 4)"),
        ("ceiling", "-(((-s0)//4))"),
        ("rounded up", "-(((-s0)//4))"),
        ("rounded down", "(s0//s1)"),
        ("max", "Max(0, s0 - 3)"),
        ("power", "s0**2*s1"),
    ],
)
def test_sizes_a_lowering_makes_print_as_the_shape_env_reads_them(which, written):
    guards = SizeGuards({"s0": 17, "s1": 5})
    text = format_value(_made(guards, which))
    assert text == written
    listing = (
        "graph prims {\n  symbol s0, hint 17\n  symbol s1, hint 5\n"
        "  %x: f32[s0, s1] = input\n"
        f"  %y: f32[s0, s1] = prims.mul(%x, {text})\n  return %y\n}}"
    )
    assert str(parse(listing, SymbolicSizes({}))) == listing
    assert guards.conditions == [] and guards.refused == []


def test_a_size_as_a_float_prints_and_parses_back():
    # a mean's count in a symbolic decomposition: ``prims.div(%sum, ToFloat(2*s25))``
    listing = """graph prims {
  symbol s25, hint 5
  %x: f32[2, s25] = input
  %sum: f32[2] = prims.sum(%x, [1])
  %mean: f32[2] = prims.div(%sum, ToFloat(2*s25))
  return %mean
}"""
    parsed = parse(listing, SymbolicSizes({}))
    assert type(parsed.outputs[0].args[1]).__name__ == "SymFloat"
    assert str(parsed) == listing


def test_printing_symbolic_strides_adds_no_guard_to_their_shape_env():
    # strides (s53, 1) against the contiguous (s7, 1): compared as SymInts, ``s53 == s7``
    # would be a guard of the ShapeEnv (a symbolic decomposition's conditions)
    listing = """graph prims {
  symbol s7, hint 5
  symbol s53, hint 9
  %x: f32[s7, s53] = input
  %square: f32[s7, s7]{s53, 1} = prims.slice(%x, [0, 0], [s7, s7], [1, 1])
  return %square
}"""
    sizes = SymbolicSizes({})
    parsed = parse(listing, sizes)
    before = len(sizes.shape_env.guards)
    assert str(parsed) == listing
    assert len(sizes.shape_env.guards) == before
