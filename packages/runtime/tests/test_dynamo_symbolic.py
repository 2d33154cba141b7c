"""Dynamo graphs with symbolic sizes imported with their symbols as input dimensions
(decision 0256); Dynamo is the harness (tests may call torch.compile)."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import from_fx
from torchstrata.core.symbolic_graphs import input_symbol_slots
from torchstrata.runtime.dynamo_sizes import concretised, symbol_slots
from torchstrata.runtime.dynamo_symbolic import DynamoTraces, same_inputs, symbolic_import


def _symbolic_graph(fn, *shapes):
    """Dynamo's graph of ``fn`` traced with symbolic sizes, its example inputs, its slots."""
    seen = []

    def backend(gm, example_inputs):
        seen.append((gm, list(example_inputs)))
        return gm.forward

    compiled = torch.compile(fn, backend=backend, dynamic=True)
    for shape in shapes:
        compiled(torch.randn(shape))
    gm, examples = seen[-1]
    return gm, examples, symbol_slots(gm, examples)


def scaled_rows(x):
    return (x * x.shape[0]).sum(0) + x.reshape(-1).sum()


def test_symbols_become_input_dimensions_and_each_size_is_checked():
    torch.compiler.reset()
    gm, examples, slots = _symbolic_graph(scaled_rows, (5, 3), (7, 3))
    assert any(dim is None for _, dim in slots.values())  # Dynamo's s77 argument
    names: dict[str, str] = {}
    graph = symbolic_import(gm, examples, slots, names=names)
    bound = input_symbol_slots(graph)
    assert set(names) == set(slots) and set(bound) == set(names.values())
    assert all(position == 0 for position, _ in bound.values())
    dynamo_name = {ours: theirs for theirs, ours in names.items()}
    for rows in (4, 9):
        x = torch.randn(rows, 3)
        args = [rows if not isinstance(e, torch.Tensor) else x for e in examples]
        values = {name: x.shape[dim] for name, (_, dim) in bound.items()}
        static = concretised(gm, args, {dynamo_name[name]: n for name, n in values.items()})
        static_graph = from_fx(static.gm, list(static.examples))
        assert same_inputs(graph, static_graph, values)
        (rows_symbol,) = [name for name, (_, dim) in bound.items() if dim == 0]
        assert not same_inputs(graph, static_graph, {**values, rows_symbol: rows + 1})
        # a transposed input at those sizes is another layout: not the trace's graph
        xt = torch.randn(3, rows).t()
        at = {dynamo_name[name]: n for name, n in values.items()}
        other = concretised(gm, [xt if a is x else a for a in args], at)
        assert not same_inputs(graph, from_fx(other.gm, list(other.examples)), values)
    torch.compiler.reset()


def attend(k_cache, v_cache, q, k, v):
    keys = torch.cat([k_cache, k], 1)
    return torch.softmax(q @ keys.transpose(1, 2), -1) @ torch.cat([v_cache, v], 1)


def _attend_import(*lengths):
    """Dynamo's names of ``attend``'s last graph's symbols, and its import (text without
    hints: the graph a compiled-graph cache key is made of)."""
    seen = []

    def backend(gm, example_inputs):
        seen.append((gm, list(example_inputs)))
        return gm.forward

    torch.compiler.reset()
    compiled = torch.compile(attend, backend=backend, dynamic=True)
    for n in lengths:
        caches = (torch.randn(2, n, 16) for _ in range(2))
        compiled(*caches, *(torch.randn(2, 1, 16) for _ in range(3)))
    gm, examples = seen[-1]
    slots = symbol_slots(gm, examples)
    graph = symbolic_import(gm, examples, slots, names={})
    torch.compiler.reset()
    return set(slots), "\n".join(line for line in str(graph).splitlines() if "hint" not in line)


def test_the_import_names_symbols_by_input_dimension_not_as_dynamo_does():
    """Dynamo's recompile at a length 17 after 16 (where the length and the width were
    one duck-sized symbol) names the length otherwise than a fresh compile at 20 (``s0``
    against ``s69``): the imported graphs' texts are the same, the key of their
    compiled-graph cache entry (decision 0497)."""
    recompiled_names, recompiled = _attend_import(16, 17)
    fresh_names, fresh = _attend_import(20)
    assert recompiled_names != fresh_names  # Dynamo's names differ...
    assert recompiled == fresh  # ...the imported graphs do not


def test_a_symbol_no_tensor_dimension_gives_is_refused():
    torch.compiler.reset()
    gm, examples, slots = _symbolic_graph(scaled_rows, (5, 3), (7, 3))
    # a symbol read from a number argument that no tensor's dimension has
    with pytest.raises(ValueError, match="no tensor argument's dimension"):
        symbolic_import(gm, examples, {**slots, "s_unknown": (0, None)})
    torch.compiler.reset()


def first_half(x):
    return x.narrow(0, 0, x.shape[0] // 2) * 2


def test_the_conditions_an_import_relied_on_are_checked_for_each_size():
    # narrow's bounds and length: the import's metadata holds where ``0 <= s - s//2`` and
    # ``s//2 != 1`` (decision 0455)
    torch.compiler.reset()
    gm, examples, slots = _symbolic_graph(first_half, (6, 3), (8, 3))
    with pytest.raises(ValueError, match="relied on size conditions"):
        symbolic_import(gm, examples, slots)
    conditions: list = []
    graph = symbolic_import(gm, examples, slots, conditions)
    assert conditions and all(condition.free_symbols for condition in conditions)
    traces = DynamoTraces(graph, lambda hints: None, conditions=conditions)
    (rows,) = {symbol.name for condition in conditions for symbol in condition.free_symbols}
    assert traces.outside_import({rows: 9}) == ""
    # at 2 and 3 rows the slice is one row long, a length the import's meta decided
    # against: those sizes are traced (and lowered) on their own
    assert traces.outside_import({rows: 3}) == f"Ne(({rows}//2), 1)"
    torch.compiler.reset()
