"""Symbolic sizes in the text form and the verifier (decision 0211): a graph with
symbols prints its declarations and parses back to the same text, the parsed graph's
symbols are those of a SymbolicSizes, and bad symbolic text or metadata is named."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from torchstrata.core import (
    GraphBuilder,
    Level,
    ParseError,
    SymbolicSizes,
    VerificationError,
    concretize_graph,
    input_meta,
    interpret,
    parse,
    symbolic_scope,
    torch_op,
    verify,
)


def _symbolic_graph():
    sizes = SymbolicSizes({"L['x']": [0], "L['y']": [1]})
    builder = GraphBuilder(Level.TORCH)
    with symbolic_scope(sizes):
        x_meta = input_meta("L['x']", torch.randn(17, 8))
        y_meta = input_meta("L['y']", torch.randn(8, 5))
        x = builder.input("x", x_meta)
        y = builder.input("y", y_meta)
        n = x_meta.shape[0]
        half = builder.call(torch_op(torch.narrow), x, 0, n - n // 2, n // 2)
        padded = builder.call(torch_op(F.pad), half, (1, 2))
        product = builder.call(torch_op(torch.matmul), x, y)
        rows = builder.call(torch_op(torch.Tensor.reshape), product, (-1,))
        graph = builder.build([padded, rows])
    return sizes, graph


def test_a_symbolic_graph_prints_declarations_and_round_trips():
    sizes, graph = _symbolic_graph()
    text = str(graph)
    x_symbol, y_symbol = (binding.name for binding in sizes.bindings)
    assert f"symbol {x_symbol} = L['x'].size()[0], hint 17" in text
    assert f"symbol {y_symbol} = L['y'].size()[1], hint 5" in text
    assert f"f32[(({x_symbol}//2)), 11]" in text or f"f32[({x_symbol}//2), 11]" in text
    into = SymbolicSizes({})
    parsed = parse(text, into)
    assert str(parsed) == text
    assert [(b.name, b.source, b.dim) for b in into.bindings] == [
        (b.name, b.source, b.dim) for b in sizes.bindings
    ]
    verify(parsed)
    values = {x_symbol: 9, y_symbol: 3}
    x, y = torch.randn(9, 8), torch.randn(8, 3)
    want = interpret(concretize_graph(graph, values), x, y)
    got = interpret(concretize_graph(parsed, values), x, y)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)


def test_verifying_records_no_guard():
    sizes, graph = _symbolic_graph()
    before = sizes.guard_exprs()
    verify(graph)
    assert sizes.guard_exprs() == before


def _text_with(line_old: str, line_new: str) -> str:
    _, graph = _symbolic_graph()
    text = str(graph)
    assert line_old in text
    return text.replace(line_old, line_new)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "f32[{s}, 8] = input",
            "f32[s5, 8] = input",
            "line 4: size expression uses undeclared symbol s5",
        ),
        ("hint 17", "hint 1", "line 2: symbol {s}: hint 1, but sizes 0 and 1 are never symbolic"),
        ("hint 17", "17", "line 2: expected 'symbol <name> = <source>, hint <size>'"),
        ("f32[{s}, 8]", "f32[{s} / 2, 8]", "unsupported size expression '{s} / 2'"),
    ],
)
def test_bad_symbolic_text_names_the_problem(old, new, message):
    sizes, graph = _symbolic_graph()
    symbol = sizes.bindings[0].name
    text = str(graph)
    old, new, message = (part.replace("{s}", symbol) for part in (old, new, message))
    assert old in text
    with pytest.raises(ParseError, match=re.escape(message)):
        parse(text.replace(old, new, 1))


def test_declarations_come_first_and_once():
    _, graph = _symbolic_graph()
    lines = str(graph).splitlines()
    declaration = lines[1]
    twice = "\n".join([lines[0], declaration, *lines[1:]])
    with pytest.raises(ParseError, match=r"line 3: symbol \w+ is declared twice"):
        parse(twice)
    late = "\n".join([*lines[:4], "symbol s3 = L['z'].size()[0], hint 4", *lines[4:]])
    with pytest.raises(ParseError, match="symbols are declared before the inputs"):
        parse(late)


def test_the_verifier_names_a_symbol_no_input_declares():
    text = """graph torch {
      symbol s0 = L['x'].size()[0], hint 6
      symbol s1 = n, hint 4
      %x: f32[s0, 3] = input
      %narrow: f32[s1, 3] = torch.narrow(%x, 0, 0, s1)
      return %narrow
    }"""
    with pytest.raises(VerificationError, match="%narrow uses symbol s1, which no input"):
        verify(parse(text))


def test_the_verifier_checks_symbolic_metadata_against_its_inputs():
    sizes, graph = _symbolic_graph()
    symbol = sizes.bindings[0].name
    text = str(graph).replace(f"[({symbol}//2), 11]", f"[{symbol} - 1, 11]")
    with pytest.raises(VerificationError, match=r"%pad: metadata .* differs from the inferred"):
        verify(parse(text))


def test_a_data_dependent_symbol_prints_and_does_not_parse():
    sizes, graph = _symbolic_graph()
    builder = GraphBuilder(Level.TORCH)
    with symbolic_scope(sizes):
        x = builder.input("x", graph.inputs[0].meta)  # type: ignore[arg-type]
        positive = builder.call(torch_op(torch.gt), x, 0)
        picked = builder.call(torch_op(torch.masked_select), x, positive)
        masked = builder.build([picked])
    text = str(masked)
    assert "(data-dependent, no hint)" in text
    with pytest.raises(VerificationError, match=r"%masked_select uses symbol u\d+"):
        verify(masked)
    with pytest.raises(ParseError, match="a data-dependent size does not parse"):
        parse(text)
