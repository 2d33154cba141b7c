"""Conditions on sizes and symbolic metadata as the compiled-graph cache stores them
(decision 0450): each reads back as what was written, or is refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sympy
import torch
from torch.utils._sympy.functions import FloorDiv, Mod

from torchstrata.core import SizeGuards, TensorMeta
from torchstrata.runtime.graph_records import BadRecord, NotCacheable
from torchstrata.runtime.symbolic_outputs import ViewLayouts, sizes_at
from torchstrata.runtime.symbolic_records import (
    expression_text,
    meta_record,
    package_record,
    read_expression,
    read_meta,
    read_view_layouts,
    view_layouts_record,
)

S0 = sympy.Symbol("s0", integer=True, positive=True)
S1 = sympy.Symbol("s1", integer=True, positive=True)


@pytest.mark.parametrize(
    "condition",
    [
        sympy.Lt(S0, 8),
        sympy.Ge(2 * S0 + S1, 17),
        sympy.Eq(Mod(S0, 4), 0),
        sympy.Eq(sympy.Mod(S0 * S1, 8), 0),  # sympy's Mod, not torch's of the same name
        sympy.Ne(FloorDiv(S0, 2), S1),
        sympy.Or(sympy.Lt(S0, 3), sympy.Gt(S1, 9)),
    ],
)
def test_a_condition_reads_back_as_itself(condition: object) -> None:
    text = expression_text(condition)
    read = read_expression(text)
    assert read == condition
    assert {s.is_integer and s.is_positive for s in read.free_symbols} == {True}


@pytest.mark.parametrize("text", [17, "Lt(s0", "Symbol('s0') +* 2", "__import__('os')"])
def test_text_that_is_no_expression_is_a_bad_record(text: object) -> None:
    with pytest.raises(BadRecord):
        read_expression(text)


def test_symbolic_metadata_reads_back_as_sizes_of_new_guards() -> None:
    written = SizeGuards({"s0": 5, "s1": 7})
    s0, s1 = written.symbol("s0"), written.symbol("s1")
    meta = TensorMeta((s0, s1 * 2, 3), torch.float16, strides=(s1 * 6, 3, 1))
    record = meta_record(meta)
    assert record is not None and record["shape"][2] == 3
    guards = SizeGuards({"s0": 11, "s1": 4})
    read = read_meta(record, guards)
    assert read is not None and read.dtype == torch.float16
    assert [getattr(size, "hint", size) for size in read.shape] == [11, 8, 3]
    assert [getattr(size, "hint", size) for size in read.strides] == [24, 3, 1]
    assert meta_record(None) is None and read_meta(None, guards) is None
    with pytest.raises(BadRecord):
        read_meta({**record, "dtype": "float99"}, guards)


def test_a_package_keeps_only_static_layouts_and_must_be_plain_data() -> None:
    static = {"shape": [4, 3], "strides": [3, 1], "dtype": "float32"}
    symbolic = {"shape": ["s0", 3], "strides": [3, 1], "dtype": "float32"}
    package = {"format": "p", "output_layouts": [static, symbolic, None]}
    assert package_record(package)["output_layouts"] == [static, None, None]
    with pytest.raises(NotCacheable):
        package_record(None)
    with pytest.raises(NotCacheable):
        package_record({"format": "p", "globals": {"x": object()}})


def test_output_view_layouts_read_back_and_evaluate_at_each_size() -> None:
    """The symbolic layouts of output aliases and views (decision 0505) read back as
    expressions that a runner's ``SizedOutputs`` evaluates at any size as the traced
    ones would be."""
    half = FloorDiv(S1, 2)
    layouts = ViewLayouts(
        aliases=((0, (S0, half), (S1, 1), 0), None),
        views=(None, (0, (S1, S0), (1, S1), 0)),
        owners=((0, (S0, S1), (S1, 1), torch.float32, torch.device("cpu")),),
    )
    read = read_view_layouts(view_layouts_record(layouts))
    assert read == layouts
    sizes = {"s0": 3, "s1": 9}
    assert sizes_at(read.aliases, sizes) == ((0, (3, 4), (9, 1), 0), None)
    assert sizes_at(read.views, sizes) == (None, (0, (9, 3), (1, 9), 0))


@pytest.mark.parametrize(
    "damage",
    [
        lambda record: record.pop("owners"),
        lambda record: record["owners"].clear(),  # a view of an output with no layout
        lambda record: record["owners"][0].__setitem__(3, "no_dtype"),
        lambda record: record["aliases"][0][1].__setitem__(0, {"size": "__import__('os')"}),
        lambda record: record.__setitem__("views", {"size": "s0"}),
    ],
)
def test_a_view_layouts_record_that_does_not_decode_is_a_bad_record(
    damage: Callable[[dict[str, Any]], object],
) -> None:
    layouts = ViewLayouts(
        aliases=((0, (S0,), (1,), 0),),
        views=((1, (S0,), (1,), 0),),
        owners=((1, (S0,), (1,), torch.float32, torch.device("cpu")),),
    )
    record = view_layouts_record(layouts)
    damage(record)
    with pytest.raises(BadRecord):
        read_view_layouts(record)
