"""Emitting expression trees as straight-line code with scoped common-subexpression reuse.

A kernel body has an outer scope (per row) and, while a loop over the inner variables is
open, an inner scope. Each distinct subexpression is emitted once, in the outermost scope
where all its loop variables are bound, so values that do not depend on the inner loop
(a row's bias, a reduction result) are computed once per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from torchstrata.inductor.ir.exprs import Constant, Expr, IndexValue, IndirectLoad, Load, children


class ExprPrinter(Protocol):
    """How a backend spells expressions."""

    def render(self, expr: Expr, operands: Sequence[str]) -> str:
        """Source text of ``expr`` given the names of its operands."""
        ...

    def define(self, name: str, expr: Expr, text: str) -> str:
        """A statement binding ``name`` to ``text`` (the value of ``expr``)."""
        ...


@attrs.define
class Scope:
    """Lines emitted in one scope and the subexpressions they define."""

    lines: list[str] = attrs.field(factory=list)
    names: dict[Expr, str] = attrs.field(factory=dict)


class ExprEmitter:
    """Emits expressions into an outer scope and an optional inner (loop) scope."""

    def __init__(
        self, printer: ExprPrinter, inner_vars: frozenset[str], prefix: str = "tmp"
    ) -> None:
        self.printer = printer
        self.inner_vars = inner_vars
        self.prefix = prefix
        self.outer = Scope()
        self.inner: Scope | None = None
        self._counter = 0
        self._depends: dict[Expr, bool] = {}

    def open_inner(self) -> None:
        """Start a new inner scope (the body of a new loop)."""
        self.inner = Scope()

    def preset_inner(self, names: dict[Expr, str]) -> None:
        """Values of the open inner scope that are already available under these names."""
        assert self.inner is not None
        self.inner.names.update(names)

    def close_inner(self) -> list[str]:
        """End the inner scope and return its lines."""
        assert self.inner is not None
        lines, self.inner = self.inner.lines, None
        return lines

    def take_outer(self) -> list[str]:
        """Lines emitted in the outer scope since the last call (keeps its names)."""
        lines, self.outer.lines = self.outer.lines, []
        return lines

    def depends_on_inner(self, expr: Expr) -> bool:
        """True when ``expr`` reads an inner loop variable."""
        known = self._depends.get(expr)
        if known is None:
            known = isinstance(expr, Load | IndirectLoad | IndexValue) and bool(
                expr.index.variables() & self.inner_vars
            )
            known = known or any(self.depends_on_inner(child) for child in children(expr))
            self._depends[expr] = known
        return known

    def emit(self, expr: Expr) -> str:
        """The name (or literal text) holding the value of ``expr``."""
        inner = self.inner is not None and self.depends_on_inner(expr)
        scope = self.inner if inner else self.outer
        assert scope is not None
        name = scope.names.get(expr)
        if name is not None:
            return name
        if self.inner is not None and not inner:
            found = self.outer.names.get(expr)
            if found is not None:
                return found
        operands = [self.emit(child) for child in children(expr)]
        text = self.printer.render(expr, operands)
        if isinstance(expr, Constant):
            return text
        name = f"{self.prefix}{self._counter}"
        self._counter += 1
        scope.lines.append(self.printer.define(name, expr, text))
        scope.names[expr] = name
        return name
