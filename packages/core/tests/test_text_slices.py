"""``slice`` arguments in the text form (decision 0493): a subscript's bounds (ints, None,
symbolic sizes) print as ``slice(start, stop, step)`` and parse back, alone, beside ``...``
or nested in a setitem's index tuple, and the verifier checks the bounds and their symbols."""

from __future__ import annotations

import operator

import pytest
import torch

from torchstrata.core import (
    GraphBuilder,
    Level,
    Node,
    ParseError,
    SymbolicSizes,
    TensorMeta,
    VerificationError,
    concretize_graph,
    input_meta,
    interpret,
    parse,
    symbolic_scope,
    torch_op,
    verify,
)

GETITEM = torch_op(operator.getitem)
SETITEM = torch_op(operator.setitem)


@pytest.mark.parametrize(
    ("index", "written"),
    [
        ((slice(1, 5), slice(None)), "(slice(1, 5, None), slice(None, None, None))"),
        (slice(None, None, 2), "slice(None, None, 2)"),
        ((slice(-3, None), 0, slice(2, 7, 3)), "(slice(-3, None, None), 0, slice(2, 7, 3))"),
        ((Ellipsis, slice(None, 4)), "(..., slice(None, 4, None))"),
        ((slice(1, None), None, Ellipsis), "(slice(1, None, None), None, ...)"),
    ],
)
def test_static_slices_print_and_parse_back(index, written):
    x = torch.randn(6, 8, 9)
    builder = GraphBuilder(Level.TORCH)
    x_node = builder.input("x", TensorMeta.from_tensor(x))
    graph = builder.build([builder.call(GETITEM, x_node, index)])
    text = str(graph)
    assert f"operator.getitem(%x, {written})" in text
    parsed = parse(text)
    assert str(parsed) == text
    assert parsed.nodes[0].args[1] == index
    verify(parsed)
    torch.testing.assert_close(interpret(parsed, x)[0], x[index])


def _slice_write_graph():
    """``cache[:, t : 2 * t] = k`` with ``t`` a symbolic size, as Dynamo hands it over."""
    sizes = SymbolicSizes({"L['k']": [1]})
    builder = GraphBuilder(Level.TORCH)
    with symbolic_scope(sizes):
        cache = builder.input("cache", input_meta("L['cache']", torch.randn(2, 80, 4)))
        k_meta = input_meta("L['k']", torch.randn(2, 16, 4))
        k = builder.input("k", k_meta)
        t = k_meta.shape[1]
        builder.call(SETITEM, cache, (slice(None), slice(t, 2 * t)), k)
        graph = builder.build([builder.call(torch_op(torch.Tensor.sum), cache, 1)])
    (symbol,) = (binding.name for binding in sizes.bindings)
    return graph, symbol


def test_symbolic_slice_bounds_in_a_setitem_index_round_trip():
    graph, s = _slice_write_graph()
    text = str(graph)
    assert f"symbol {s} = L['k'].size()[1], hint 16" in text
    assert f"(slice(None, None, None), slice({s}, 2*{s}, None)), %k)" in text
    into = SymbolicSizes({})
    parsed = parse(text, into)
    assert str(parsed) == text
    verify(parsed)
    (write,) = [node for node in parsed.nodes if node.op == SETITEM]
    bounds = write.args[1][1]
    assert all(isinstance(bound, torch.SymInt) for bound in (bounds.start, bounds.stop))
    assert bounds.start.node.shape_env is into.shape_env
    assert str(bounds.stop) == f"2*{s}"
    cache, k = torch.randn(2, 80, 4), torch.randn(2, 7, 4)
    want = cache.clone()
    want[:, 7:14] = k
    torch.testing.assert_close(
        interpret(concretize_graph(parsed, {s: 7}), cache, k)[0], want.sum(1)
    )


def test_a_slice_bound_declares_its_symbol_in_the_listing():
    # the symbol appears only in the slice (no metadata holds it): still declared
    text = """graph torch {
      symbol s0 = L['x'].size()[0], hint 6
      %x: f32[s0, 8] = input
      %y: f32[3, 8] = input
      %set: _ = operator.setitem(%x, slice(s0 - 3, None, None), %y)
      return %x
    }"""
    parsed = parse(text)
    assert str(parsed).splitlines()[1] == "  symbol s0 = L['x'].size()[0], hint 6"
    verify(parsed)
    undeclared = text.replace("slice(s0 - 3, None, None)", "slice(s1, None, None)")
    with pytest.raises(ParseError, match=r"line 5: unknown name 's1' in arguments"):
        parse(undeclared)


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("slice(%y)", r"a slice bound is an int, None or a size, not __node_ref_y"),
        ("slice(0, 1.5)", r"a slice bound is an int, None or a size, not 1.5"),
        ("slice(0, 1, 2, 3)", r"unsupported argument syntax: slice\(0, 1, 2, 3\)"),
        ("slice(stop=2)", r"unsupported argument syntax: slice\(stop=2\)"),
    ],
)
def test_bad_slices_do_not_parse(argument, message):
    text = f"""graph torch {{
      %x: f32[6, 8] = input
      %y: f32[8] = input
      %g: f32[2, 8] = operator.getitem(%x, {argument})
      return %g
    }}"""
    with pytest.raises(ParseError, match=f"line 4: {message}"):
        parse(text)


def test_the_verifier_names_a_node_as_a_slice_bound():
    builder = GraphBuilder(Level.TORCH)
    x = builder.input("x", TensorMeta.from_tensor(torch.randn(6, 8)))
    graph = builder.build([builder.call(GETITEM, x, (slice(1, 3), slice(None)))])
    (getitem,) = graph.nodes
    bound = Node("n", None, meta=TensorMeta.from_tensor(torch.tensor(2)))
    bad = Node(getitem.name, getitem.op, (x, (slice(0, bound),)), meta=getitem.meta)
    broken = type(graph)(graph.level, graph.inputs, (bad,), (bad,))
    with pytest.raises(VerificationError, match=r"%getitem: slice bound Node\(%n = None\) is not"):
        verify(broken, check_meta=False)
