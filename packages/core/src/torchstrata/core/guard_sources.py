"""Guard sources rewritten to read the values a check function has fetched already.

A generated guard check (the runtime's cache-entry checks, capture's checks of the
segments after a graph break) fetches each distinct source once into a local variable.
Sources nest: a module tree reads ``L['self']._modules['0']``, then
``L['self']._modules['0'].__dict__``, then ``len(L['self']._modules['0'].normalized_shape)``,
and one guard reads a module's four hook dicts as ``D['_forward_hooks'] or D['_forward_pre_hooks'] or ...`` over its
``__dict__`` ``D``. :class:`FetchedValues` replaces every subexpression of a source that
an earlier fetch evaluated by that fetch's variable, so each attribute chain is walked
once per check, wherever it appears in a source (a prefix, a call's argument, one
operand of an ``or``).

This assumes what the guards assume already: reading a source has no side effect, so
reading it again between two guards gives the value read first.
"""

from __future__ import annotations

import ast
import functools
import keyword
import re
from collections import Counter
from collections.abc import Iterable, Iterator

#: Expressions worth sharing (a name too: ``_self`` is a global of the check, its copy a local).
_SHARED_NODES = (ast.Attribute, ast.Subscript, ast.Call, ast.Name)
#: The check function's parameters: a local already, never worth a variable of its own.
_PARAMETERS = frozenset({"L", "G", "A", "S", "C"})
#: Expressions with names of their own (a name there may not be the check's).
_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


#: A read chain as ``ast.unparse`` writes it: a name, then attributes, subscripts by a
#: word in single quotes and subscripts by a non-negative int literal.
_NAME = r"[A-Za-z_]\w*"
_SEGMENT = re.compile(rf"\.{_NAME}|\['\w+'\]|\[(?:0|[1-9]\d*)\]")
_CHAIN = re.compile(rf"{_NAME}(?:{_SEGMENT.pattern})*")


@functools.lru_cache(maxsize=65536)
def chain_ends(source: str) -> tuple[int, ...] | None:
    """Where each read of a plain read chain ends (``L['self']._modules['0'].weight``:
    after ``L``, ``L['self']``, ``L['self']._modules``, ...), or None when ``source`` is
    anything else (a call, an operator, another spelling).

    Most guard sources are such chains; their normalised text is the source itself and
    their reads are its prefixes, so the guard builders need no parse for them (an
    ``ast.parse`` and ``unparse`` per source was most of building a deep model's guards).
    """
    if not source.isascii() or _CHAIN.fullmatch(source) is None:
        return None
    head = re.match(_NAME, source)
    assert head is not None
    ends = [head.end()]
    for segment in _SEGMENT.finditer(source, head.end()):
        if segment.group().startswith(".") and keyword.iskeyword(segment.group()[1:]):
            return None  # not Python: the parse raises
        ends.append(segment.end())
    if keyword.iskeyword(head.group()):
        return None  # ``None``, ``True``: constants, not names
    return tuple(ends)


@functools.lru_cache(maxsize=65536)
def normalised(source: str) -> str:
    """``source`` as ``ast.unparse`` writes it (one spelling per expression, on one line).

    Raises ``SyntaxError`` for a malformed source (the capture stage's bug)."""
    if chain_ends(source) is not None:
        return source
    return ast.unparse(ast.parse(source, mode="eval"))


def _text(normal: str, node: ast.AST) -> str:
    """The text of ``node`` in the normalised source it was parsed from: the slice its
    position names (what ``ast.unparse(node)`` writes, without an unparse per node)."""
    start, end = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
    if normal.isascii():
        return normal[start:end]
    return normal.encode()[start:end].decode()  # the offsets count UTF-8 bytes


def _reads(node: ast.AST) -> Iterator[ast.AST]:
    """The attribute, subscript and name reads that evaluating ``node`` always makes,
    innermost first (the order they are evaluated in). Operands that may not be
    evaluated are left out: an ``or``/``and`` after its first, the branches of a
    conditional expression, comparisons after the first of a chain, and anything
    inside a lambda or comprehension. Fetching such a read up front could raise where
    the source would not have read it."""
    if isinstance(node, ast.BoolOp):
        yield from _reads(node.values[0])
        return
    if isinstance(node, ast.IfExp):
        yield from _reads(node.test)
        return
    if isinstance(node, ast.Compare):
        yield from _reads(node.left)
        yield from _reads(node.comparators[0])
        return
    if isinstance(node, _SCOPES):
        return
    for child in ast.iter_child_nodes(node):
        yield from _reads(child)
    if isinstance(node, ast.Attribute | ast.Subscript) or (
        isinstance(node, ast.Name) and node.id not in _PARAMETERS
    ):
        yield node


@functools.lru_cache(maxsize=65536)
def _read_texts(source: str) -> tuple[str, ...]:
    """:func:`_reads` of ``source`` as normalised texts, each once, the source itself
    left out."""
    ends = chain_ends(source)
    if ends is not None:  # the chain's proper prefixes, the name unless a parameter
        prefixes = [source[:end] for end in ends[:-1]]
        return tuple(prefixes[1:] if prefixes and prefixes[0] in _PARAMETERS else prefixes)
    normal = normalised(source)
    texts = dict.fromkeys(
        _text(normal, node) for node in _reads(ast.parse(normal, mode="eval").body)
    )
    texts.pop(normal, None)
    return tuple(texts)


class _ReadFetched(ast.NodeTransformer):
    """Replaces each outermost subexpression found in ``variables`` by its variable
    (over a tree parsed from the normalised text ``normal``)."""

    def __init__(self, variables: dict[str, str], normal: str) -> None:
        self.variables = variables
        self.normal = normal

    def visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, _SCOPES):
            return node
        if isinstance(node, _SHARED_NODES):
            variable = self.variables.get(_text(self.normal, node))
            if variable is not None:
                return ast.copy_location(ast.Name(id=variable, ctx=ast.Load()), node)
        return self.generic_visit(node)


class FetchedValues:
    """The sources a generated check has fetched, each with the variable holding it.

    :param sources: every source the check will read. A read that two or more of them
        always make (``M._parameters`` in ``M._parameters['weight']`` and
        ``M._parameters['bias']``) is fetched once, before the first source that makes
        it (:meth:`reads_before`), and read from its variable by the others.
    """

    def __init__(self, sources: Iterable[str] = ()) -> None:
        #: Each fetched source (as written in its guard) and its variable.
        self.variables: dict[str, str] = {}
        #: The same, keyed by the source's normalised text (``ast.unparse``).
        self._by_text: dict[str, str] = {}
        counts = Counter(text for source in set(sources) for text in _read_texts(source))
        self._repeated = {text for text, count in counts.items() if count >= 2}

    def __contains__(self, source: str) -> bool:
        return self.get(source) is not None

    def get(self, source: str) -> str | None:
        """The variable holding ``source``'s value, or None when it is not fetched."""
        variable = self.variables.get(source)
        if variable is None and self._by_text:
            variable = self._by_text.get(normalised(source))
        return variable

    def reads_before(self, source: str) -> list[str]:
        """The reads that ``source`` shares with another source and that are not fetched
        yet, innermost first: fetch each of them (as an expression of its own) before
        ``source``. A read that fails fails the guard of ``source``, which makes it."""
        if not self._repeated:
            return []
        return [
            text
            for text in _read_texts(source)
            if text in self._repeated and text not in self._by_text
        ]

    def expression(self, source: str) -> str:
        """``source`` reading every subexpression fetched already from its variable.

        Raises ``SyntaxError`` for a malformed source (the capture stage's bug)."""
        normal = normalised(source)
        if not self._by_text:
            return source
        ends = chain_ends(source)
        if ends is not None:  # the longest fetched prefix, read from its variable
            for end in reversed(ends):
                variable = self._by_text.get(source[:end])
                if variable is not None:
                    return variable + source[end:]
            return source
        tree = ast.parse(normal, mode="eval")
        return ast.unparse(_ReadFetched(self._by_text, normal).visit(tree))

    def add(self, source: str, variable: str) -> None:
        """Record that ``variable`` holds the value of ``source``."""
        self.variables[source] = variable
        self._by_text[normalised(source)] = variable
