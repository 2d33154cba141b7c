"""Parsing the text form of a graph (``str(graph)``) back into a :class:`Graph`.

Grammar, one statement per line::

    graph <level> {
      symbol <name> = <source>, hint <size>
      %<name>: <meta> = input
      %<name>: <meta> = <op>(<arg>, ..., <key>=<arg>) @<tag> ...
      return %<name>, ...
    }

``<meta>`` is ``_`` (no tensor), ``f32[4, 8]`` with optional ``{strides}``, device
(``cuda:0``) and ``grad`` suffixes, or a parenthesised tuple of those. Arguments are
``%node`` references, Python literals, ``inf``/``nan``, ``torch.<dtype>``,
``torch.<memory_format>``, ``device('cuda:0')``, ``slice(start, stop, step)`` (a
subscript's bounds: ints, ``None`` or size expressions), ``...``, and lists/tuples of those. A call may end
with tags, each a word after ``@`` (``@recompute``). Node metadata
is taken from the text as written, not re-inferred, so a golden file is checked exactly.

Symbolic sizes (decision 0211): each ``symbol`` line declares one, before the inputs;
shapes, strides and arguments may then hold size expressions over the declared symbols
(``f32[s77, 64]``, ``(s77//2)``), read back as ``torch.SymInt`` values of one
:class:`~torchstrata.core.SymbolicSizes` (``parse(text, sizes)``, or a new one).
"""

from __future__ import annotations

import ast
import re
from keyword import iskeyword
from typing import Any

import torch

from torchstrata.core.dtypes import dtype_from_short_name
from torchstrata.core.graph import Graph, Node, NodeMeta
from torchstrata.core.meta import TensorMeta
from torchstrata.core.ops import Level, parse_op
from torchstrata.core.symbolic import SymbolicSizes
from torchstrata.core.symbolic_text import SizeReader, SymbolError


class ParseError(ValueError):
    """The text is not a valid graph listing; the message names the line."""


_TENSOR_META = re.compile(
    r"(?P<dtype>[a-z]+\d*)\[(?P<shape>[^\]]*)\]"
    r"(?:\{(?P<strides>[^}]*)\})?"
    r"(?:\s+(?P<device>(?:cpu|cuda|meta|xpu|mps)(?::\d+)?))?"
    r"(?:\s+(?P<grad>grad))?"
)
_NODE_LINE = re.compile(r"%(?P<name>\w+)\s*:\s*(?P<meta>.+?)\s*=\s*(?P<rhs>.+)")
_CALL = re.compile(r"(?P<op>[\w.]+)\((?P<args>.*)\)(?P<tags>(?:\s+@\w+)*)")
_REF = re.compile(r"%(\w+)")
_REF_PREFIX = "__node_ref_"
#: One token of the argument lists that :func:`_plain_args` reads: a node reference, a
#: number as ``repr`` writes ints and floats, a dotted word, or punctuation.
_PLAIN_TOKEN = re.compile(
    r"%\w+"  # a node reference
    r"|-?(?:\d+\.\d*(?:e[-+]?\d+)?|\d+e[-+]?\d+|\d+)(?![\w.])"  # a number
    r"|-inf(?!\w)|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?"  # a word
    r"|[\[\](),=]"  # punctuation
    r"|\S"  # anything else: one character that no token starts with
)
#: The first characters of the number tokens.
_NUMBER_START = frozenset("-0123456789")
#: The words that are constants in an argument list (the floats made afresh per read).
_SPECIAL_WORDS: dict[str, Any] = {"True": True, "False": False, "None": None}
_FLOAT_WORDS = frozenset({"inf", "-inf", "nan"})


def _sizes(text: str | None, symbols: SizeReader | None) -> tuple[int, ...]:
    sizes = []
    for part in _split_top_level(text or ""):
        if part.lstrip("-").isdigit():
            sizes.append(int(part))
        elif symbols is None:
            raise ParseError(f"size {part!r} is not an integer and no symbol is declared")
        else:
            sizes.append(symbols.read(part))
    return tuple(sizes)


def _split_top_level(text: str) -> list[str]:
    if "(" not in text and "[" not in text and "{" not in text:  # sizes: no nesting
        pieces = text.split(",")
        if not pieces[-1].strip():
            pieces.pop()
        return [piece.strip() for piece in pieces]
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        depth += char in "([{"
        depth -= char in ")]}"
        current.append(char)
    if "".join(current).strip():
        parts.append("".join(current))
    return [part.strip() for part in parts]


def parse_meta(text: str, symbols: SizeReader | None = None) -> NodeMeta:
    """Parse the metadata part of a node line (size expressions over the symbols
    ``symbols`` has read)."""
    text = text.strip()
    if text == "_":
        return None
    if text.startswith("(") and text.endswith(")"):
        return tuple(parse_meta(part, symbols) for part in _split_top_level(text[1:-1]))  # type: ignore[misc]
    match = _TENSOR_META.fullmatch(text)
    if not match:
        raise ParseError(f"cannot read tensor metadata {text!r}")
    shape = _sizes(match["shape"], symbols)
    strides = _sizes(match["strides"], symbols) if match["strides"] is not None else None
    return TensorMeta(
        shape,
        dtype_from_short_name(match["dtype"]),
        match["device"] or "cpu",
        strides,
        requires_grad=match["grad"] is not None,
    )


class _ArgReader:
    def __init__(self, env: dict[str, Node], symbols: SizeReader | None) -> None:
        self.env = env
        self.symbols = symbols
        #: The metadata read so far by its text (without symbols: the same text reads
        #: as equal metadata, immutable, so one object serves every node that has it).
        self.metas: dict[str, NodeMeta] = {}

    def meta(self, text: str) -> NodeMeta:
        """:func:`parse_meta` of ``text``, once per distinct text when no symbol is declared."""
        if self.symbols is not None:
            return parse_meta(text, self.symbols)
        meta = self.metas.get(text)
        if meta is None:
            meta = self.metas[text] = parse_meta(text)
        return meta

    def read(self, node: ast.expr) -> Any:
        if self.symbols is not None and SizeReader.is_size_expression(node):
            return self.symbols.evaluate(node)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List):
            return [self.read(item) for item in node.elts]
        if isinstance(node, ast.Tuple):
            return tuple(self.read(item) for item in node.elts)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self.read(node.operand)
        if isinstance(node, ast.Name):
            return self._name(node.id)
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "torch"
        ):
            value = getattr(torch, node.attr, None)
            if isinstance(value, torch.dtype | torch.memory_format | torch.layout):
                return value
            raise ParseError(f"torch.{node.attr} is not a dtype, memory format or layout")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "complex"
            and len(node.args) == 2
            and not node.keywords
        ):
            return complex(self.read(node.args[0]), self.read(node.args[1]))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "slice"
            and 1 <= len(node.args) <= 3
            and not node.keywords
        ):
            return slice(*(self._bound(arg) for arg in node.args))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "device"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant)
        ):
            return torch.device(str(node.args[0].value))
        raise ParseError(f"unsupported argument syntax: {ast.unparse(node)}")

    def _bound(self, node: ast.expr) -> Any:
        """One bound of a ``slice(...)``: an int, None or a size expression (decision 0493)."""
        bound = self.read(node)
        if bound is not None and type(bound) is not int and not isinstance(bound, torch.SymInt):
            raise ParseError(f"a slice bound is an int, None or a size, not {ast.unparse(node)}")
        return bound

    def _name(self, name: str) -> Any:
        if name.startswith(_REF_PREFIX):
            ref = name.removeprefix(_REF_PREFIX)
            if ref not in self.env:
                raise ParseError(f"%{ref} is used before it is defined")
            return self.env[ref]
        if name in _FLOAT_WORDS:
            return float(name)
        if name in _SPECIAL_WORDS:
            return _SPECIAL_WORDS[name]
        if self.symbols is not None and name in self.symbols.symbols:
            return self.symbols.symbols[name]
        raise ParseError(f"unknown name {name!r} in arguments")


def parse(text: str, sizes: SymbolicSizes | None = None) -> Graph:
    """Read a graph listing produced by ``str(graph)``; its declared symbols become
    symbols of ``sizes`` (a new :class:`SymbolicSizes` when None)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines or not lines[0].startswith("graph ") or lines[-1] != "}":
        raise ParseError("a graph listing starts with 'graph <level> {' and ends with '}'")
    header = lines[0].removeprefix("graph ").removesuffix("{").strip()
    try:
        level = Level(header)
    except ValueError:
        raise ParseError(f"unknown level {header!r}; expected torch, aten or prims") from None
    env: dict[str, Node] = {}
    inputs: list[Node] = []
    nodes: list[Node] = []
    outputs: list[Node] | None = None
    symbols: SizeReader | None = None
    reader = _ArgReader(env, None)
    for number, line in enumerate(lines[1:-1], start=2):
        try:
            if line.startswith("symbol "):
                if env:
                    raise ParseError("symbols are declared before the inputs")
                if symbols is None:
                    symbols = SizeReader(sizes if sizes is not None else SymbolicSizes({}))
                    reader.symbols = symbols
                symbols.declare(line)
                continue
            if line.startswith("return"):
                names = [
                    part.strip() for part in line.removeprefix("return").split(",") if part.strip()
                ]
                outputs = [_output(name, reader) for name in names]
                continue
            node = _parse_node_line(line, reader)
        except (ParseError, SymbolError, SyntaxError, ValueError, TypeError) as error:
            raise ParseError(f"line {number}: {error}: {line}") from None
        if node.name in env:
            raise ParseError(f"line {number}: %{node.name} is defined twice")
        env[node.name] = node
        (inputs if node.is_input else nodes).append(node)
    if outputs is None:
        raise ParseError("the listing has no return line")
    return Graph(level, tuple(inputs), tuple(nodes), tuple(outputs))


def _parse_node_line(line: str, reader: _ArgReader) -> Node:
    match = _NODE_LINE.fullmatch(line)
    if not match:
        raise ParseError("expected '%name: meta = rhs'")
    meta = reader.meta(match["meta"])
    rhs = match["rhs"].strip()
    if rhs == "input":
        return Node(match["name"], None, meta=meta)
    call = _CALL.fullmatch(rhs)
    if not call:
        raise ParseError(f"expected op(args) but found {rhs!r}")
    plain = _plain_args(call["args"], reader.env)
    if plain is not None:
        args, kwargs = plain
    else:
        arg_source = _REF.sub(_REF_PREFIX + r"\1", call["args"])
        expr = ast.parse(f"f({arg_source})", mode="eval").body
        assert isinstance(expr, ast.Call)
        args = tuple(reader.read(arg) for arg in expr.args)
        kwargs = {kw.arg: reader.read(kw.value) for kw in expr.keywords if kw.arg is not None}
    tags = frozenset(tag.lstrip("@") for tag in call["tags"].split())
    return Node(match["name"], parse_op(call["op"]), args, kwargs, meta, tags)


def _output(text: str, reader: _ArgReader) -> Any:
    """One name of the return line: a defined ``%node`` (read directly), else whatever
    the argument syntax reads (an error naming it)."""
    match = _REF.fullmatch(text)
    if match is not None and match[1] in reader.env:
        return reader.env[match[1]]
    return reader.read(ast.parse(_REF.sub(_REF_PREFIX + r"\1", text), mode="eval").body)


class _NotPlain(Exception):
    """An argument list outside :func:`_plain_args`' subset: read through ``ast``."""


def _plain_args(text: str, env: dict[str, Node]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """The arguments of a call as ``ast`` reads them, for the lists most nodes have: defined
    node references, ints, floats, ``True``/``False``/``None``, ``inf``/``nan``,
    ``torch.<dtype>`` and lists and tuples of those, positional then keyword. None for
    anything else (strings, symbolic sizes, ``device(...)``, an undefined reference, a
    malformed list): the caller reads those through ``ast``, errors included, so the
    result never depends on which path read it (an ``ast.parse`` per line was most of
    reading a graph back)."""
    tokens = _PLAIN_TOKEN.findall(text)
    tokens.append("")  # the end
    try:
        return _PlainReader(tokens, env).arguments()
    except _NotPlain:
        return None


class _PlainReader:
    """A reader over :data:`_PLAIN_TOKEN` tokens (then ``""``, the end); raises
    :class:`_NotPlain` at anything it does not read exactly as ``ast`` would."""

    __slots__ = ("at", "env", "tokens")

    def __init__(self, tokens: list[str], env: dict[str, Node]) -> None:
        self.tokens = tokens
        self.env = env
        self.at = 0

    def arguments(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        tokens = self.tokens
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        while tokens[self.at]:
            if tokens[self.at + 1] == "=":
                name = tokens[self.at]
                if not name.isidentifier() or iskeyword(name) or name in kwargs:
                    raise _NotPlain
                self.at += 2
                kwargs[name] = self.value()
            elif kwargs:
                raise _NotPlain  # a positional argument after a keyword one
            else:
                args.append(self.value())
            if tokens[self.at]:
                if tokens[self.at] != ",":
                    raise _NotPlain
                self.at += 1
        return tuple(args), kwargs

    def value(self) -> Any:
        token = self.tokens[self.at]
        self.at += 1
        first = token[:1]
        if first == "%":
            node = self.env.get(token[1:])
            if node is None:
                raise _NotPlain
            return node
        if first in _NUMBER_START and token != "-inf":
            if len(token) == 1 and not token.isdigit():
                raise _NotPlain  # a lone "-"
            if not token.lstrip("-").isdigit():
                if "." not in token and "e" not in token:
                    raise _NotPlain
                return float(token)
            return int(token)
        if first == "[":
            return self._items("]")
        if first == "(":
            items = self._items(")")
            if len(items) == 1 and self.tokens[self.at - 2] != ",":
                return items[0]  # a parenthesised value, as in Python
            return tuple(items)
        if first.isalpha() or first == "_" or token == "-inf":
            return _plain_word(token)
        raise _NotPlain

    def _items(self, close: str) -> list[Any]:
        """Values up to ``close``, separated by commas (one may end them)."""
        tokens = self.tokens
        items: list[Any] = []
        while tokens[self.at] != close:
            items.append(self.value())
            if tokens[self.at] == ",":
                self.at += 1
            elif tokens[self.at] != close:
                raise _NotPlain
        self.at += 1
        return items


def _plain_word(text: str) -> Any:
    if text in _FLOAT_WORDS:
        return float(text)
    if text in _SPECIAL_WORDS:
        return _SPECIAL_WORDS[text]
    module, _, attribute = text.partition(".")
    if module == "torch" and attribute:
        value = getattr(torch, attribute, None)
        if isinstance(value, torch.dtype | torch.memory_format | torch.layout):
            return value
    raise _NotPlain
