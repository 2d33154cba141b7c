"""C++ source of a symbolic size with floor division or modulo in it (decision 0407).

Sizes are sympy expressions whose ``floor`` and ``Mod`` floor, as Python's ``//`` and
``%`` do; C++'s ``/`` and ``%`` on ``int64_t`` truncate toward zero. They agree where the
dividend is non-negative and the divisor positive, which the sizes' being integers >= 2
usually decides (``s0 // 2``, ``(s0 + 1) // 2``), and the quotient prints as ``/``. A
dividend whose sign is not known (a roll's shift ``Mod(1 - s0, s0)``) prints the floored
form: the truncated quotient less one where the remainder is non-zero and of the other
sign than the divisor; the remainder plus the divisor then. Operands are pure integer
expressions over the kernel's ``int64_t`` symbol arguments, printed twice where needed.
"""

from __future__ import annotations

from typing import Any

from torchstrata.core import SourcePrinter

#: literals beyond a 32-bit ``int`` take the ``LL`` suffix
_INT32_MAX = 2**31 - 1


class CppSizePrinter(SourcePrinter):
    """C++ (``int64_t`` arithmetic) source of a size expression."""

    def integer(self, value: int) -> str:
        """See :class:`~torchstrata.core.SourcePrinter`."""
        return f"{value}LL" if abs(value) > _INT32_MAX else str(value)

    def floordiv(self, numerator: Any, denominator: Any) -> str:
        """See :class:`~torchstrata.core.SourcePrinter`."""
        a, b = self.print(numerator), self.print(denominator)
        if self.truncates_alike(numerator, denominator):
            return f"({a} / {b})"
        return f"({a} / {b} - static_cast<int64_t>({_floored(a, b)}))"

    def mod(self, value: Any, modulus: Any) -> str:
        """See :class:`~torchstrata.core.SourcePrinter`."""
        a, b = self.print(value), self.print(modulus)
        if self.truncates_alike(value, modulus):
            return f"({a} % {b})"
        return f"({a} % {b} + static_cast<int64_t>({_floored(a, b)}) * {b})"

    def pair(self, largest: bool, a: str, b: str) -> str:
        """See :class:`~torchstrata.core.SourcePrinter`."""
        relation = ">" if largest else "<"
        return f"(({a}) {relation} ({b}) ? ({a}) : ({b}))"

    def spell_float(self, name: str, *args: Any) -> str:
        """See :class:`~torchstrata.core.SourcePrinter`: in ``double``, with the C
        library's ``sqrt`` and ``pow`` that Python's ``math.sqrt`` and ``**`` call."""
        return _CPP_FLOATS[name](*args)


def _double(value: str) -> str:
    return f"static_cast<double>({value})"


#: each float function of sizes (``SourcePrinter.spell_float``'s names) in C++
_CPP_FLOATS: dict[str, Any] = {
    "literal": repr,
    "ToFloat": _double,
    "IntTrueDiv": lambda a, b: f"({_double(a)} / {_double(b)})",
    "FloatTrueDiv": lambda a, b: f"({a} / {b})",
    "OpaqueUnaryFn_sqrt": lambda a: f"std::sqrt({a})",
    "FloatPow": lambda a, b: f"std::pow({a}, {b})",
}


def _floored(a: str, b: str) -> str:
    """The C++ condition under which truncating ``a / b`` is one more than flooring."""
    return f"({a} % {b} != 0 && (({a} % {b} < 0) != ({b} < 0)))"


#: the printer the C++ codegen makes active (``core.size_printer``) while it generates
cpp_size_source = CppSizePrinter()
