"""Source text of a symbolic size whose expression is more than a sum of products
(issue 33, decision 0407): ``floor(s0/2)``, ``Mod(1 - s0, s0)``, ``Max(1, s0//3)``.

A sum of products of symbols and integers reads the same in Python and C, and
``core.SizeValue`` prints it anywhere. Floor division and modulo do not: Python's ``//``
and ``%`` floor, C's ``/`` and ``%`` truncate, and the two differ where an operand is
negative (a roll's shift ``Mod(1 - s0, s0)``). Such an expression prints only where a
printer for the target language is active (:func:`size_printer`): the launcher's Python
(:func:`python_source`, also ``repr``'s) or a backend's (the C++ codegen's
``codegen.cpp.size_source``). Elsewhere printing it is a refused read, as before.

A printer is a :class:`SourcePrinter` subclass: it prints the operations sizes are made
of, and refuses any other function (a float function of a size is no size).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator
from typing import Any


@functools.cache
def _sympy() -> Any:
    import sympy  # type: ignore[import-untyped]

    return sympy


#: the printer of the source being generated (:func:`size_printer`), else None
_PRINTER: contextvars.ContextVar[Callable[[Any], str] | None] = contextvars.ContextVar(
    "torchstrata_size_printer", default=None
)


@contextlib.contextmanager
def size_printer(printer: Callable[[Any], str]) -> Iterator[None]:
    """Within the block, ``str`` of a symbolic size whose expression is not a sum of
    products prints it with ``printer`` (a sympy expression in, source text out)."""
    token = _PRINTER.set(printer)
    try:
        yield
    finally:
        _PRINTER.reset(token)


def active_printer() -> Callable[[Any], str] | None:
    """The printer of :func:`size_printer` in effect, or None."""
    return _PRINTER.get()


class UnprintableSize(ValueError):
    """An expression with a function no printer spells (a float function, say)."""


#: torch.utils._sympy.functions names (the ShapeEnv's sizes) by what they compute
_FLOOR_DIVS = frozenset({"FloorDiv", "CleanDiv"})
_PYTHON_MODS = frozenset({"Mod", "PythonMod"})  # sympy's Mod floors too
#: ``CeilToInt``/``FloorToInt`` of an ``IntTrueDiv``: ``math.ceil(a / b)`` of int sizes
_ROUNDED_DIVS = frozenset({"CeilToInt", "FloorToInt"})


def rounded_quotient(
    expr: Any, args: tuple[Any, ...] | None = None
) -> tuple[Any, Any, bool] | None:
    """``(numerator, denominator, ceiling)`` where ``expr`` rounds a quotient of sizes to
    an integer: sympy's ``floor``/``ceiling`` of a quotient, or ``FloorToInt``/``CeilToInt``
    of an ``IntTrueDiv`` (``math.ceil(s0 / 32)`` of a meta function, a CUDA attention's
    padded log-sum-exp); else None. ``args`` stand for ``expr.args`` (rewritten ones).
    The printers spell it as a floor or ceiling division."""
    sympy = _sympy()
    args = expr.args if args is None else args
    if len(args) != 1:
        return None
    (quotient,) = args
    if isinstance(expr, sympy.floor | sympy.ceiling):
        numerator, denominator = quotient.as_numer_denom()
        return numerator, denominator, isinstance(expr, sympy.ceiling)
    name = type(expr).__name__
    if name in _ROUNDED_DIVS and type(quotient).__name__ == "IntTrueDiv":
        numerator, denominator = quotient.args
        return numerator, denominator, name == "CeilToInt"
    return None


#: float functions of sizes a printer may spell (``SourcePrinter.spell_float``): a size
#: as a float, the true quotient of two sizes or floats, a square root, a power
_FLOAT_FUNCTIONS = frozenset(
    {"ToFloat", "IntTrueDiv", "FloatTrueDiv", "OpaqueUnaryFn_sqrt", "FloatPow"}
)


class SourcePrinter:
    """Prints a size expression: integers, symbols, ``+``, ``*``, integer powers (as
    products), floor and ceiling division, modulo, ``Max`` and ``Min``. Subclasses spell
    :meth:`floordiv`, :meth:`mod`, :meth:`extreme` and :meth:`integer` for a language."""

    def __call__(self, expr: Any) -> str:
        return self.print(expr)

    def print(self, expr: Any) -> str:
        """The source of ``expr``, parenthesised unless one symbol or integer."""
        if expr.is_Integer:
            return self.integer(int(expr))
        if expr.is_Symbol:
            return str(expr.name)
        if expr.is_Add:
            terms = [self.print(arg) for arg in expr.as_ordered_terms()]
            return "(" + " + ".join(terms) + ")"
        if expr.is_Mul:
            numerator, denominator = expr.as_numer_denom()
            if denominator != 1:
                raise UnprintableSize(f"{expr}: a rational size")
            factors = [self.print(arg) for arg in expr.as_ordered_factors()]
            return "(" + "*".join(factors) + ")"
        if expr.is_Pow and expr.exp.is_Integer and expr.exp >= 1:
            return "(" + "*".join([self.print(expr.base)] * int(expr.exp)) + ")"
        name = type(expr).__name__
        rounded = rounded_quotient(expr)
        if rounded is not None:
            numerator, denominator, ceiling = rounded
            return (self.ceildiv if ceiling else self.floordiv)(numerator, denominator)
        if name in _FLOOR_DIVS:
            return self.floordiv(*expr.args)
        if name == "CeilDiv":
            return self.ceildiv(*expr.args)
        if name in _PYTHON_MODS:
            return self.mod(*expr.args)
        if name in ("Max", "Min"):
            return self.extreme(name == "Max", list(expr.args))
        return self.float_function(expr)

    def float_function(self, expr: Any) -> str:
        """A float of sizes (decision 0500), in double: ``ToFloat``, ``IntTrueDiv``,
        ``FloatTrueDiv``, ``OpaqueUnaryFn_sqrt``, ``FloatPow`` and float literals, spelled
        by :meth:`spell_float`; anything else raises :class:`UnprintableSize`."""
        name = type(expr).__name__
        if expr.is_Float:
            return self.spell_float("literal", float(expr))
        if name in _FLOAT_FUNCTIONS:
            return self.spell_float(name, *(self.print(arg) for arg in expr.args))
        raise UnprintableSize(f"{expr}: {name} of a size")

    def spell_float(self, name: str, *args: Any) -> str:
        """The source of the float function ``name`` (of :data:`_FLOAT_FUNCTIONS`, or
        ``literal`` of a Python float) of the printed ``args``: a printer that prints
        floats of sizes spells them; this one refuses."""
        raise UnprintableSize(f"{name}: a float of sizes")

    def integer(self, value: int) -> str:
        """An integer literal."""
        return str(value)

    def floordiv(self, numerator: Any, denominator: Any) -> str:
        """``floor(numerator / denominator)``."""
        raise NotImplementedError

    def ceildiv(self, numerator: Any, denominator: Any) -> str:
        """``ceil(numerator / denominator)``, as ``-floor(-numerator / denominator)``."""
        return f"(-{self.floordiv(-numerator, denominator)})"

    def mod(self, value: Any, modulus: Any) -> str:
        """``value`` modulo ``modulus``, with the sign of ``modulus`` (Python's)."""
        raise NotImplementedError

    def extreme(self, largest: bool, args: list[Any]) -> str:
        """The largest (or smallest) of ``args``, folded pairwise by :meth:`pair`."""
        text = self.print(args[0])
        for other in args[1:]:
            text = self.pair(largest, text, self.print(other))
        return text

    def pair(self, largest: bool, a: str, b: str) -> str:
        """The larger (or smaller) of the printed ``a`` and ``b``."""
        raise NotImplementedError

    @staticmethod
    def truncates_alike(numerator: Any, denominator: Any) -> bool:
        """Whether ``numerator`` is non-negative and ``denominator`` positive: there C's
        and Triton's truncating ``/`` and ``%`` agree with flooring ones."""
        return bool(numerator.is_nonnegative) and bool(denominator.is_positive)


class PythonPrinter(SourcePrinter):
    """Python source: ``//`` and ``%`` floor, as sympy's ``floor`` and ``Mod`` do."""

    def floordiv(self, numerator: Any, denominator: Any) -> str:
        """See :class:`SourcePrinter`."""
        return f"({self.print(numerator)} // {self.print(denominator)})"

    def mod(self, value: Any, modulus: Any) -> str:
        """See :class:`SourcePrinter`."""
        return f"({self.print(value)} % {self.print(modulus)})"

    def extreme(self, largest: bool, args: list[Any]) -> str:
        """See :class:`SourcePrinter`."""
        return f"{'max' if largest else 'min'}({', '.join(self.print(a) for a in args)})"

    def spell_float(self, name: str, *args: Any) -> str:
        """See :class:`SourcePrinter`: as Python computes the float (``math.sqrt``;
        generated Python that prints one imports ``math``)."""
        return _PYTHON_FLOATS[name](*args)


_PYTHON_FLOATS: dict[str, Any] = {
    "literal": repr,
    "ToFloat": lambda a: f"float({a})",
    "IntTrueDiv": lambda a, b: f"({a} / {b})",
    "FloatTrueDiv": lambda a, b: f"({a} / {b})",
    "OpaqueUnaryFn_sqrt": lambda a: f"math.sqrt({a})",
    "FloatPow": lambda a, b: f"({a} ** {b})",
}


#: Python source of a size expression (a launcher's, ``repr``'s)
python_source = PythonPrinter()
