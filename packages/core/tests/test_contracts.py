"""GraphContract: what the runtime promises the decomposition and codegen about a graph."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import (
    NO_CONTRACT,
    GraphBuilder,
    GraphContract,
    Level,
    TensorMeta,
    WriteBack,
    aten,
)


def _transpose_graph():
    builder = GraphBuilder(Level.ATEN)
    x = builder.input("x", TensorMeta((2, 3), torch.float32))
    y = builder.input("y", TensorMeta((3,), torch.float32))
    relu = builder.call(aten("relu.default"), x)
    return builder.build([builder.call(aten("add.Tensor"), relu, y)])


def test_write_backs_are_typed_and_read_as_a_mapping():
    contract = GraphContract(user_outputs=1, write_backs={1: 0, 2: 3})
    assert contract.write_backs == (WriteBack(1, 0), WriteBack(2, 3))
    assert contract.write_back_inputs() == {1: 0, 2: 3}
    assert NO_CONTRACT.write_back_inputs() == {}


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"user_outputs": -1}, ValueError, "user_outputs=-1"),
        ({"user_outputs": 1.0}, ValueError, "user_outputs=1.0"),
        ({"write_backs": [(1, 0)]}, TypeError, "not a WriteBack"),
        ({"input_layouts": [(2, 3)]}, TypeError, "not a TensorMeta"),
    ],
)
def test_bad_fields_are_named(fields, error, match):
    with pytest.raises(error, match=match):
        GraphContract(**fields)


def test_input_layouts_relay_the_inputs_and_what_depends_on_them():
    graph = _transpose_graph()
    column_major = TensorMeta((2, 3), torch.float32, strides=(1, 2))
    contract = GraphContract(input_layouts=(column_major, None))
    assert not contract.follows_layouts(graph)
    laid_out = contract.laid_out(graph)
    assert laid_out.inputs[0].meta.strides == (1, 2)
    assert laid_out.inputs[1].meta == graph.inputs[1].meta
    assert laid_out.nodes[0].meta.strides == (1, 2)  # relu keeps its input's layout
    assert contract.follows_layouts(laid_out)
    assert GraphContract().laid_out(graph) is graph


@pytest.mark.parametrize(
    ("layouts", "match"),
    [
        ((TensorMeta((3, 2), torch.float32),), "only strides may differ"),
        ((TensorMeta((2, 3), torch.float64),), "only strides may differ"),
        ((None, None, None), "lays out 3 inputs; the graph has 2"),
    ],
)
def test_a_layout_for_another_graph_is_an_error(layouts, match):
    with pytest.raises(ValueError, match=match):
        GraphContract(input_layouts=layouts).laid_out(_transpose_graph())
