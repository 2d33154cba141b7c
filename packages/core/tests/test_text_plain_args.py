"""Argument lists read without ``ast`` (``text._plain_args``, decision 0302): whatever they
read is what the ``ast`` path reads, value and type, and anything else goes to ``ast``."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchstrata.core import Node, ParseError, parse, text
from torchstrata.core.graph import format_value

HEADER = "graph aten {\n  %x: f32[4] = input\n  %y: i64[2, 3] = input\n"


def _listing(args: str) -> str:
    return HEADER + f"  %out: f32[4] = aten.foo.default({args})\n  return %out\n}}"


def _read(args: str, monkeypatch: pytest.MonkeyPatch | None = None) -> Node:
    """The ``out`` node of a listing calling with ``args``; through ``ast`` only when
    ``monkeypatch`` is given."""
    if monkeypatch is None:
        return parse(_listing(args)).nodes[-1]
    with monkeypatch.context() as patch:
        patch.setattr(text, "_plain_args", lambda *_: None)
        return parse(_listing(args)).nodes[-1]


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same types (nan equal to nan, -0.0 not to 0.0, nodes by name)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, Node):
        return a.name == b.name
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _plain(args: str) -> Any:
    env = {name: Node(name, None) for name in ("x", "y")}
    return text._plain_args(args, env)


_leaves = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.sampled_from([torch.float32, torch.bfloat16, torch.int64, torch.contiguous_format]),
    st.sampled_from(["%x", "%y"]),
)
_values = st.recursive(
    _leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple)),
    max_leaves=12,
)


def _render(value: Any) -> str:
    if isinstance(value, str):  # a node reference
        return value
    if isinstance(value, list):
        return "[" + ", ".join(_render(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(_render(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return format_value(value)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_values, max_size=4),
    st.dictionaries(st.sampled_from(["dim", "keepdim", "dtype", "out_dtype"]), _values, max_size=3),
)
def test_printed_arguments_read_as_ast_reads_them(args, kwargs):
    rendered = [_render(a) for a in args] + [f"{k}={_render(v)}" for k, v in kwargs.items()]
    source = ", ".join(rendered)
    plain = _plain(source)
    assert plain is not None, source  # everything the printer writes here is plain
    with pytest.MonkeyPatch.context() as patch:
        reference = _read(source, patch)
    assert _same(plain[0], reference.args), source
    assert list(plain[1]) == list(reference.kwargs)
    assert all(_same(plain[1][k], reference.kwargs[k]) for k in plain[1]), source


@pytest.mark.parametrize(
    "args",
    [
        "(3)",  # parenthesised, not a tuple
        "(3,)",
        "()",
        "[]",
        "%x, [1, -2, 3],",
        "-inf, inf, nan, -0.0, 1e-05, 1.5e+300, 1e400",
        "torch.float32, dim=[(1, 2), ()], keepdim=True",
        "  %y ,  2  ",
    ],
)
def test_plain_lists_read_as_ast_reads_them(args, monkeypatch):
    assert _plain(args) is not None
    plain, reference = _read(args), _read(args, monkeypatch)
    assert _same(plain.args, reference.args)
    assert list(plain.kwargs) == list(reference.kwargs)
    assert all(_same(plain.kwargs[k], reference.kwargs[k]) for k in plain.kwargs)


@pytest.mark.parametrize(
    "args",
    [
        "%x, approximate='tanh'",  # strings
        "%x, (s0//2)",  # symbolic sizes
        "device('cpu')",
        "complex(1.0, 2.0)",
        "%z",  # undefined: ast names the error
        "dim=1, %x",  # positional after keyword
        "dim=1, dim=2",  # repeated keyword
        "True=1",
        "[1, , 2]",
        "1 2",
        "1.0.0",
        "torch.nn",
        "x",
    ],
)
def test_other_lists_go_to_ast(args):
    assert _plain(args) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("%z", "used before it is defined"),
        ("dim=1, %x", "positional argument"),
        ("x", "unknown name"),
    ],
)
def test_errors_are_the_ast_paths(args, message):
    with pytest.raises(ParseError, match=message):
        parse(_listing(args))


def test_outputs_read_directly_and_errors_name_the_node():
    graph = parse(HEADER + "  return %y, %x\n}")
    assert [node.name for node in graph.outputs] == ["y", "x"]
    with pytest.raises(ParseError, match="used before it is defined"):
        parse(HEADER + "  return %x, %nope\n}")
