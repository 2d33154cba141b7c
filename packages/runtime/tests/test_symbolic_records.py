"""Conditions on sizes and symbolic metadata as the compiled-graph cache stores them
(decision 0450): each reads back as what was written, or is refused."""

from __future__ import annotations

import pytest
import sympy
import torch
from torch.utils._sympy.functions import FloorDiv, Mod

from torchstrata.core import SizeGuards, TensorMeta
from torchstrata.runtime.graph_records import BadRecord, NotCacheable
from torchstrata.runtime.symbolic_records import (
    expression_text,
    meta_record,
    package_record,
    read_expression,
    read_meta,
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
