"""One decomposition of a symbolic trace's partitioned graphs for every size (decision
0280): :class:`SharedDecomposition` decomposes each graph once, in a ShapeEnv of its own,
and serves a size only where the conditions that decomposition relied on hold."""

from __future__ import annotations

import torch

from torchstrata.core import (
    AotResult,
    GraphBuilder,
    GraphContract,
    Level,
    SymbolicSizes,
    aten,
    concretize_graph,
    input_meta,
    symbolic_scope,
)
from torchstrata.runtime.symbolic_decomp import SharedDecomposition


def _rows_graph():
    """``relu(x) * 2`` over ``x [n, 4]``, ``n`` symbolic (hint 16): an ATen graph."""
    sizes = SymbolicSizes({"L['x']": [0]})
    builder = GraphBuilder(Level.ATEN)
    with symbolic_scope(sizes):
        x = builder.input("x", input_meta("L['x']", torch.randn(16, 4)))
        out = builder.call(aten("mul.Tensor"), builder.call(aten("relu.default"), x), 2.0)
        graph = builder.build([out])
    (binding,) = sizes.bindings
    return graph, binding.name


class Recorder:
    """A decomp stage that returns its graph as it is (an ATen graph is a valid
    'prims' graph for these tests) and records each call; ``decide`` runs on the first
    input's row count first."""

    def __init__(self, decide=None) -> None:
        self.calls: list[object] = []
        self.decide = decide

    def __call__(self, graph, contract):
        rows = graph.inputs[0].tensor_meta.shape[0]
        self.calls.append(rows)
        if self.decide is not None:
            self.decide(rows)
        return graph


def _rows(graph) -> int:
    return graph.inputs[0].tensor_meta.shape[0]


def test_each_graph_is_decomposed_once_for_every_size():
    graph, symbol = _rows_graph()
    shared = SharedDecomposition(AotResult(forward=graph))
    stage = Recorder()
    for n in (16, 17, 5, 33):
        prims = shared.at("forward", {symbol: n}, GraphContract(user_outputs=1), stage)
        assert prims is not None and _rows(prims) == n
    assert len(stage.calls) == 1 and shared.decompositions == 1
    # a contract that lays out no input is the same contract
    layouts = GraphContract(user_outputs=1, input_layouts=(None,))
    assert shared.at("forward", {symbol: 7}, layouts, stage) is not None
    assert len(stage.calls) == 1


def test_a_size_outside_a_condition_of_the_decomposition_is_decomposed_on_its_own():
    graph, symbol = _rows_graph()
    shared = SharedDecomposition(AotResult(forward=graph))
    branches = []
    stage = Recorder(decide=lambda rows: branches.append(bool(rows > 8)))
    contract = GraphContract(user_outputs=1)
    assert shared.at("forward", {symbol: 17}, contract, stage) is not None
    assert branches == [True]  # decided for the hint, 16 rows: ``s > 8`` recorded
    assert shared.at("forward", {symbol: 5}, contract, stage) is None
    assert shared.at("forward", {symbol: 9}, contract, stage) is not None


def test_a_specialising_decomposition_leaves_the_traces_sizes_alone():
    graph, symbol = _rows_graph()
    shared = SharedDecomposition(AotResult(forward=graph))
    stage = Recorder(decide=int)  # ``int(s)``: Eq(s, 16), a replacement s -> 16
    contract = GraphContract(user_outputs=1)
    assert _rows(shared.at("forward", {symbol: 16}, contract, stage)) == 16
    assert shared.at("forward", {symbol: 17}, contract, stage) is None
    # the trace's graph still makes every size static at that size
    assert _rows(concretize_graph(graph, {symbol: 17})) == 17


def test_what_the_shared_decomposition_does_not_serve():
    graph, symbol = _rows_graph()
    shared = SharedDecomposition(AotResult(forward=graph))
    stage = Recorder()
    laid_out = GraphContract(input_layouts=(graph.inputs[0].tensor_meta,))
    assert shared.at("forward", {symbol: 16}, laid_out, stage) is None
    assert shared.at("backward", {symbol: 16}, GraphContract(), stage) is None  # none
    assert stage.calls == []

    def fails(graph, contract):
        stage.calls.append("failed")
        raise ValueError("no rule for this on symbolic sizes")

    for n in (16, 17):
        assert shared.at("forward", {symbol: n}, GraphContract(), fails) is None
    assert stage.calls == ["failed"]  # tried once
