"""Guard sources rewritten to read the values a check function has fetched already.

A generated guard check (the runtime's cache-entry checks, capture's checks of the
segments after a graph break) fetches each distinct source once into a local variable. Sources nest: a module tree
reads ``L['self']._modules['0']``, then ``L['self']._modules['0'].__dict__``, then
``len(L['self']._modules['0'].normalized_shape)``, and one guard reads a module's four
hook dicts as ``D['_forward_hooks'] or D['_forward_pre_hooks'] or ...`` over its
``__dict__`` ``D``. :class:`FetchedValues` replaces every subexpression of a source that
an earlier fetch evaluated by that fetch's variable, so each attribute chain is walked
once per check, wherever it appears in a source (a prefix, a call's argument, one
operand of an ``or``).

This assumes what the guards assume already: reading a source has no side effect, so
reading it again between two guards gives the value read first.
"""

from __future__ import annotations

import ast

#: Expressions worth sharing (a name too: ``_self`` is a global of the check, its copy a local).
_SHARED_NODES = (ast.Attribute, ast.Subscript, ast.Call, ast.Name)


class _ReadFetched(ast.NodeTransformer):
    """Replaces each outermost subexpression found in ``variables`` by its variable."""

    def __init__(self, variables: dict[str, str]) -> None:
        self.variables = variables

    def visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, _SHARED_NODES):
            variable = self.variables.get(ast.unparse(node))
            if variable is not None:
                return ast.copy_location(ast.Name(id=variable, ctx=ast.Load()), node)
        return self.generic_visit(node)


class FetchedValues:
    """The sources a generated check has fetched, each with the variable holding it."""

    def __init__(self) -> None:
        #: Each fetched source (as written in its guard) and its variable.
        self.variables: dict[str, str] = {}
        #: The same, keyed by the source's normalised text (``ast.unparse``).
        self._by_text: dict[str, str] = {}

    def __contains__(self, source: str) -> bool:
        return source in self.variables

    def get(self, source: str) -> str | None:
        """The variable holding ``source``'s value, or None when it is not fetched."""
        return self.variables.get(source)

    def expression(self, source: str) -> str:
        """``source`` reading every subexpression fetched already from its variable.

        Raises ``SyntaxError`` for a malformed source (the capture stage's bug)."""
        tree = ast.parse(source, mode="eval")
        if not self._by_text:
            return source
        return ast.unparse(_ReadFetched(self._by_text).visit(tree))

    def add(self, source: str, variable: str) -> None:
        """Record that ``variable`` holds the value of ``source``."""
        self.variables[source] = variable
        self._by_text[ast.unparse(ast.parse(source, mode="eval"))] = variable
