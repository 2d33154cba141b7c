"""Graphs and AOT results as the compiled-graph cache writes them: only what reads back."""

from __future__ import annotations

import attrs
import pytest
import torch

from torchstrata.core import AotResult, GraphBuilder, Level, TensorMeta, aten
from torchstrata.runtime.graph_records import (
    BadRecord,
    NotCacheable,
    aot_record,
    graph_text,
    read_aot,
    read_graph,
)


def _forward():
    b = GraphBuilder(Level.ATEN)
    x = b.input("x", TensorMeta((4, 3), torch.float32, requires_grad=True))
    y = b.call(aten("mul.Tensor"), x, 2.5)
    return b.build([b.call(aten("add.Tensor"), y, float("inf")), y])


def test_an_aot_result_reads_back_equal():
    forward = _forward()
    aot = AotResult(
        forward=forward,
        backward=forward,
        num_user_outputs=1,
        num_saved=1,
        output_aliases=(None, (0, (4, 3), (3, 1), 0)),
        grad_inputs=(0,),
    )
    again = read_aot(aot_record(aot))
    # graphs compare by their nodes' identity: the text stands for them
    assert attrs.evolve(again, forward=forward, backward=forward) == aot
    assert str(again.forward) == str(forward) == str(again.backward)


def test_tensor_constants_are_not_cacheable():
    aot = AotResult(forward=_forward(), constants=(torch.ones(2),))
    with pytest.raises(NotCacheable, match="tensor constants"):
        aot_record(aot)


def test_bad_records_are_named():
    with pytest.raises(BadRecord, match="does not parse"):
        read_graph("graph aten {\n  nonsense\n}")
    with pytest.raises(BadRecord, match="other fields"):
        read_aot({"forward": graph_text(_forward())})
    record = aot_record(AotResult(forward=_forward()))
    with pytest.raises(BadRecord, match="unexpected value"):
        read_aot({**record, "num_saved": "three"})


def test_a_text_that_does_not_print_back_is_a_bad_record():
    text = graph_text(_forward())
    assert str(read_graph(text)) == text
    # parses, but prints otherwise (the parser reads `2.50` as 2.5): never used as written
    altered = text.replace("2.5", "2.50")
    assert altered != text
    with pytest.raises(BadRecord, match="does not read back as the same graph"):
        read_graph(altered)


def test_a_graph_without_a_text_form_is_not_cacheable():
    b = GraphBuilder(Level.ATEN)
    x = b.input("x", TensorMeta((4,), torch.float32))
    meta = TensorMeta((4,), torch.float32)
    graph = b.build([b.call(aten("mul.Tensor"), x, object(), meta=meta)])
    with pytest.raises(NotCacheable, match="no text form"):
        graph_text(graph)
