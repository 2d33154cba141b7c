"""A program captured under a symbolic scope traces its later segments with symbolic
sizes where a size changes at their instruction (decision 0206)."""

from __future__ import annotations

import torch

from torchstrata.capture import capture, graph_break
from torchstrata.core import (
    SymbolicSizes,
    concretize_graph,
    graph_has_symbols,
    input_symbol_slots,
    interpret,
    symbolic_scope,
)


def split(x):
    y = torch.tanh(x) * 2
    graph_break()
    return y[: y.shape[0] // 2].sum(0) - y.mean(0)


def _compile_segment(compiled):
    """A segment compiler that runs each graph in the interpreter, a symbolic one made
    static for the call's sizes; ``compiled`` collects the graphs it was given."""

    def compile_segment(graph):
        compiled.append(graph)
        slots = input_symbol_slots(graph)

        def run(*inputs):
            values = {name: inputs[p].shape[d] for name, (p, d) in slots.items()}
            return interpret(concretize_graph(graph, values), *inputs)

        return run

    return compile_segment


def _program(sizes, compiled):
    with symbolic_scope(sizes):
        return capture(split, (torch.randn(6, 3),), {}, compile_segment=_compile_segment(compiled))


def _run(result, x):
    first = result.graphs[0]
    slots = input_symbol_slots(first)

    def run_first(*inputs):
        values = {name: inputs[p].shape[d] for name, (p, d) in slots.items()}
        return interpret(concretize_graph(first, values), *inputs)

    return result.program([run_first], (x,), {})


def test_a_resume_point_turns_symbolic_on_its_second_size():
    compiled: list = []
    result = _program(SymbolicSizes({"L['x']": [0]}), compiled)
    assert result.program.dynamic and graph_has_symbols(result.graphs[0])
    for rows in (6, 7, 9, 4, 7, 30, 2, 5):
        x = torch.randn(rows, 3)
        torch.testing.assert_close(_run(result, x), split(x))
    (segments,) = result.program.segments.values()
    assert len(segments) == 2  # static for 6, symbolic for every other size
    assert [graph_has_symbols(g) for g in compiled] == [False, True]
    assert any("L['y'].size()[0] >= 2" in guard.description for guard in segments[1].guards)


def test_a_static_capture_keeps_its_segments_static():
    compiled: list = []
    result = capture(split, (torch.randn(6, 3),), {}, compile_segment=_compile_segment(compiled))
    assert not result.program.dynamic
    for rows in (6, 7, 9):
        x = torch.randn(rows, 3)
        torch.testing.assert_close(
            result.program([lambda *i: interpret(result.graphs[0], *i)], (x,), {}), split(x)
        )
    (segments,) = result.program.segments.values()
    assert len(segments) == 3 and not any(map(graph_has_symbols, compiled))
