"""Symbolic sizes in the text form of a graph (decision 0211).

A listing whose metadata or arguments hold symbolic sizes declares each symbol on a
line of its own before the inputs::

    symbol s77 = L['x'].size()[0], hint 17

(the input dimension the symbol stands for, and the size the capture saw there, which
meta inference decides with). Shapes, strides and arguments then write size
expressions as the ShapeEnv prints them: ``s77``, ``s77 - 1``, ``(s77//2)``,
``Mod(s77, 3)``, ``Max(0, s77 - 3)``. :class:`SizeReader` reads them back as
``torch.SymInt`` values of a :class:`~torchstrata.core.symbolic.SymbolicSizes`, so a
parsed graph prints as it was written.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
from typing import Any

import torch

from torchstrata.core.symbolic import SYMBOLIC_TYPES, SymbolicSizes

_DECLARATION = re.compile(
    r"symbol\s+(?P<name>\w+)\s*(?:=\s*(?P<source>.+?))?\s*,\s*hint\s+(?P<hint>\d+)"
)

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a**b,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "Mod": lambda a, b: a % b,
    "PythonMod": lambda a, b: a % b,  # the ShapeEnv's name where an operand may be < 0
    "Max": lambda *values: _fold(torch.sym_max, values),
    "Min": lambda *values: _fold(torch.sym_min, values),
    "ToFloat": lambda value: torch.sym_float(value),  # a size as a float (a mean's count)
    # floats of sizes (an attention's scale, decision 0500)
    "OpaqueUnaryFn_sqrt": lambda value: torch.sym_sqrt(value),
    "FloatTrueDiv": lambda a, b: a / b,
    "IntTrueDiv": lambda a, b: a / b,
    "FloatPow": lambda a, b: a**b,
}


def _fold(fn: Callable[[Any, Any], Any], values: tuple[Any, ...]) -> Any:
    result = values[0]
    for value in values[1:]:
        result = fn(result, value)
    return result


class SymbolError(ValueError):
    """A size expression or symbol declaration that cannot be read; the message names
    the symbol or syntax at fault."""


#: Argument types that hold no symbol, answered without a look at their attributes
#: (every graph is scanned for symbols whenever it is printed: a cache key, a record).
_PLAIN = {int, float, bool, str, type(None)}


def holds_no_symbols(kind: type) -> None:
    """Let the symbol scan pass values of ``kind`` over without a look at their
    attributes: a type whose values never hold a symbol themselves (a graph node, whose
    metadata and arguments are scanned on their own)."""
    _PLAIN.add(kind)


def _symbols_in(value: Any, found: dict[Any, Any]) -> None:
    if type(value) in _PLAIN:
        return
    if isinstance(value, SYMBOLIC_TYPES):
        _add_symbols(value, found)
    elif isinstance(value, list | tuple):
        for item in value:
            _symbols_in(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _symbols_in(item, found)
    elif getattr(type(value), "is_size_value", False):  # a lowering's size (0494)
        for symbol in sorted(value.expr.free_symbols, key=str):
            found.setdefault(symbol, value.guards)
    elif isinstance(value, slice):  # a subscript's bounds (``x[:, s0 : 2 * s0]``)
        _symbols_in((value.start, value.stop, value.step), found)
    elif hasattr(value, "shape") and hasattr(value, "strides"):
        for size in (*value.shape, *value.strides):
            if type(size) is not int:
                _symbols_in(size, found)


def _add_symbols(value: Any, found: dict[Any, Any]) -> None:
    for symbol in sorted(value.node.expr.free_symbols, key=str):
        found.setdefault(symbol, value.node.shape_env)


def symbols_of(values: Iterable[Any]) -> dict[Any, Any]:
    """Every sympy symbol in ``values`` (metadata, arguments, nested), in order of first
    appearance, with the ShapeEnv it belongs to."""
    found: dict[Any, Any] = {}
    for value in values:
        _symbols_in(value, found)
    return found


def declaration(symbol: Any, shape_env: Any) -> str:
    """``symbol s77 = L['x'].size()[0], hint 17``: where the symbol's value is read
    (when the ShapeEnv knows) and the value the capture saw; ``symbol s53, hint 9`` for
    a symbol that only names itself, as a symbolic lowering's are (its ``SizeGuards``
    in place of the ShapeEnv: its hint is the size of the call lowered, decision 0494)."""
    hints = getattr(shape_env, "hints", None)
    if isinstance(hints, dict):  # a lowering's SizeGuards
        return f"symbol {symbol}, hint {int(hints[str(symbol)])}"
    values = getattr(shape_env, "backed_var_to_val", None)
    if values is None:
        values = shape_env.var_to_val
    hint = values.get(symbol)
    if hint is None:  # printing never fails; parsing such a listing does
        return f"symbol {symbol} (data-dependent, no hint)"
    sources = shape_env.var_to_sources.get(symbol) or ()
    name = sources[0].name if sources else ""
    name = name() if callable(name) else name  # a method in some torch versions
    where = f" = {name}" if name and name != str(symbol) else ""
    return f"symbol {symbol}{where}, hint {int(hint)}"


class SizeReader:
    """Reads symbol declarations and size expressions into the symbols of ``sizes``."""

    def __init__(self, sizes: SymbolicSizes) -> None:
        self.sizes = sizes
        #: the declared name -> its symbolic size
        self.symbols: dict[str, Any] = {}

    def declare(self, line: str) -> None:
        """Read one ``symbol`` line; the symbol gets the declared name back when the
        source is the one it was captured from (the ShapeEnv names symbols by source)."""
        match = _DECLARATION.fullmatch(line.strip())
        if line.strip().endswith("(data-dependent, no hint)"):
            raise SymbolError(
                f"{line.strip().removeprefix('symbol ')}: a data-dependent size does not parse"
            )
        if not match:
            raise SymbolError(
                f"expected 'symbol <name> = <source>, hint <size>' but found {line.strip()!r}"
            )
        name = match["name"]
        if name in self.symbols:
            raise SymbolError(f"symbol {name} is declared twice")
        hint = int(match["hint"])
        if hint < 2:
            raise SymbolError(f"symbol {name}: hint {hint}, but sizes 0 and 1 are never symbolic")
        self.symbols[name] = self.sizes.declare(match["source"] or name, hint, name)

    def read(self, text: str) -> Any:
        """One size expression (``s77 - 1``) as an int or a ``SymInt``."""
        try:
            expr = ast.parse(text.strip(), mode="eval").body
        except SyntaxError:
            raise SymbolError(f"cannot read size expression {text.strip()!r}") from None
        return self.evaluate(expr)

    def evaluate(self, node: ast.expr) -> Any:
        """A parsed size expression evaluated with the declared symbols."""
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value  # a float in a float of sizes (``FloatPow(ToFloat(s0), -0.5)``)
        if isinstance(node, ast.Name):
            if node.id not in self.symbols:
                raise SymbolError(f"size expression uses undeclared symbol {node.id}")
            return self.symbols[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self.evaluate(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](self.evaluate(node.left), self.evaluate(node.right))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCTIONS
            and node.args
            and not node.keywords
        ):
            return _FUNCTIONS[node.func.id](*(self.evaluate(arg) for arg in node.args))
        raise SymbolError(f"unsupported size expression {ast.unparse(node)!r}")

    @staticmethod
    def is_size_expression(node: ast.expr) -> bool:
        """Whether an argument's syntax is a size expression (not a literal or a node)."""
        return isinstance(node, ast.BinOp) or (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCTIONS
        )
