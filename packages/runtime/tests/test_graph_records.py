"""Graphs and AOT results as the compiled-graph cache writes them: only what reads back."""

from __future__ import annotations

import json

import attrs
import pytest
import torch

from torchstrata.core import AotResult, GraphBuilder, Level, TensorMeta, aten
from torchstrata.runtime.graph_records import (
    MAX_CONSTANT_BYTES,
    BadRecord,
    NotCacheable,
    aot_record,
    graph_text,
    read_aot,
    read_constant,
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


def _constants() -> tuple[torch.Tensor, ...]:
    return (
        torch.tensor([1.5, -2.0, float("nan")]),
        torch.tensor(3.25, dtype=torch.bfloat16),
        torch.arange(6, dtype=torch.int64).reshape(2, 3),
        torch.tensor([True, False]),
    )


def test_lifted_constants_read_back_equal_through_json():
    constants = _constants()
    aot = AotResult(forward=_forward(), constants=constants)
    again = read_aot(json.loads(json.dumps(aot_record(aot))))
    assert len(again.constants) == len(constants)
    for read, wrote in zip(again.constants, constants, strict=True):
        assert read.dtype == wrote.dtype and read.device == wrote.device
        torch.testing.assert_close(read, wrote, equal_nan=True, rtol=0, atol=0)
    # an entry without constants has no constants field (entries written before)
    assert "constants" not in aot_record(AotResult(forward=_forward()))


def test_constants_that_cannot_be_stored_are_not_cacheable():
    aot = AotResult(forward=_forward(), constants=(torch.ones(2),))
    with pytest.raises(NotCacheable, match="tensor constants"):
        aot_record(aot, constants=False)  # a lowering for many sizes
    big = torch.zeros(MAX_CONSTANT_BYTES // 4 + 1)
    with pytest.raises(NotCacheable, match="bytes of tensor constants"):
        aot_record(AotResult(forward=_forward(), constants=(big,)))
    strided = torch.arange(8.0)[::2]
    with pytest.raises(NotCacheable, match="not contiguous"):
        aot_record(AotResult(forward=_forward(), constants=(strided,)))


def test_bad_constant_records_are_named():
    record = aot_record(AotResult(forward=_forward(), constants=(torch.ones(2),)))
    (constant,) = record["constants"]
    with pytest.raises(BadRecord, match="does not load"):
        read_aot({**record, "constants": [{**constant, "data": "not base64!"}]})
    with pytest.raises(BadRecord, match="recorded dtype and shape"):
        read_aot({**record, "constants": [{**constant, "shape": [3]}]})
    with pytest.raises(BadRecord, match="recorded dtype and shape"):
        read_aot({**record, "constants": [{**constant, "dtype": "float16"}]})
    with pytest.raises(BadRecord, match="other fields"):
        read_aot({**record, "constants": [{**constant, "extra": 1}]})
    with pytest.raises(BadRecord, match="not a list"):
        read_aot({**record, "constants": []})
    assert read_constant(constant).tolist() == [1.0, 1.0]


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
