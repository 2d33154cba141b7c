"""Triton source of a symbolic size with floor division or modulo in it (decisions 0438,
0470).

A Triton kernel of a symbolic lowering takes the lowering's symbols as integer arguments
(decision 0400) and prints sizes over them: ``x1 + (s0//2)*x0``. Sizes are sympy
expressions whose ``floor`` and ``Mod`` floor, as Python's ``//`` and ``%`` do; Triton's
integer ``//`` and ``%`` follow C (truncating toward zero) when compiled, and so does its
interpreter. They agree where the dividend is non-negative and the divisor positive, which
the sizes' being integers >= 2 decides for ``s0 // 2``, ``(s0 + 1) // 2`` and ``Mod(1,
s0)``: those print as they read. A dividend or divisor whose sign is not known (a slice
write's offset ``Mod(s0 - Mod(s0, s0 - 40), 40 - s0)``) prints a form that both
conventions evaluate to the floored result, without a branch (decision 0470):

* ``Mod(a, b)`` as ``((a % b + b) % b)``: ``a % b`` lies strictly between ``-|b|`` and
  ``|b|`` under either convention; adding ``b`` gives a dividend of ``b``'s sign (or
  zero), where truncating and flooring agree, and the remainder is the one of ``b``'s sign
  that Python's ``%`` gives.
* ``floor(a / b)`` as ``((a - Mod(a, b)) // b)``, that ``Mod`` printed as above: the
  division is exact, where truncating and flooring agree.

A zero divisor is no size (sympy's ``Mod(a, 0)`` is ``nan``): a lowering's conditions
keep it from the sizes it serves, as for the C++ printer's floored form (decision 0407).
``Max``/``Min`` print as ``tl.maximum``/``tl.minimum``; any other function (a float
function of a size) raises :class:`~torchstrata.core.UnprintableSize`: the site reads the
size, and the sizes lower as before (on their own).
"""

from __future__ import annotations

import struct
from typing import Any

from torchstrata.core import SourcePrinter, UnprintableSize


class TritonSizePrinter(SourcePrinter):
    """Triton (and Python) source of a size expression, whose ``//`` and ``%`` give
    sympy's floored values whether they truncate (Triton) or floor (Python)."""

    def floordiv(self, numerator: Any, denominator: Any) -> str:
        """See :class:`~torchstrata.core.SourcePrinter`."""
        a, b = self.print(numerator), self.print(denominator)
        if self.truncates_alike(numerator, denominator):
            return f"({a} // {b})"
        return f"(({a} - {self._floored_mod(a, b)}) // {b})"

    def mod(self, value: Any, modulus: Any) -> str:
        """See :class:`~torchstrata.core.SourcePrinter`."""
        a, b = self.print(value), self.print(modulus)
        if self.truncates_alike(value, modulus):
            return f"({a} % {b})"
        return self._floored_mod(a, b)

    @staticmethod
    def _floored_mod(a: str, b: str) -> str:
        """Python's ``a % b`` under truncating and flooring ``%`` alike (module doc)."""
        return f"(({a} % {b} + {b}) % {b})"

    def pair(self, largest: bool, a: str, b: str) -> str:
        """See :class:`~torchstrata.core.SourcePrinter`: ``tl.maximum`` / ``tl.minimum``
        of the kernel's integer scalars (a contiguous stride ``Max(1, s0//2)``)."""
        return f"{'tl.maximum' if largest else 'tl.minimum'}({a}, {b})"

    def float_function(self, expr: Any) -> str:
        """See :class:`~torchstrata.core.SourcePrinter`: in float64 (Python's double;
        ``tl.sqrt`` and ``/`` of float64 are IEEE-rounded). A power only of exponent
        ``0.5`` or ``-0.5`` (``d ** -0.5``: one division of the square root, within a
        double's ulp of Python's ``pow``); other powers are unprintable."""
        if type(expr).__name__ == "FloatPow":
            base, exponent = expr.args
            if not exponent.is_Number or float(exponent) not in (0.5, -0.5):
                raise UnprintableSize(f"{expr}: a power of a size")
            root = f"tl.sqrt({self.print(base)})"
            return root if float(exponent) > 0 else f"({_float64(1.0)} / {root})"
        return super().float_function(expr)

    def spell_float(self, name: str, *args: Any) -> str:
        """See :class:`~torchstrata.core.SourcePrinter`."""
        spell = _TRITON_FLOATS.get(name)
        if spell is None:
            raise UnprintableSize(f"{name}: a float of sizes")
        return str(spell(*args))


def _float64(value: float) -> str:
    """A float64 scalar: a bare Python float in a kernel is a float32 constant, so one that
    float32 holds exactly (``1.0``, ``0.5``) is written bare (promoted exactly where it
    meets a float64) and any other as a float64 ``tl.full``."""
    if struct.unpack("f", struct.pack("f", value))[0] == value:
        return repr(value)
    return f"tl.full([], {value!r}, tl.float64)"


def _to_float64(value: str) -> str:
    return f"({value}).to(tl.float64)"


#: each float function of sizes (``SourcePrinter.spell_float``'s names) in Triton, float64
#: (a power: :meth:`TritonSizePrinter.float_function`)
_TRITON_FLOATS: dict[str, Any] = {
    "literal": _float64,
    "ToFloat": _to_float64,
    "IntTrueDiv": lambda a, b: f"({_to_float64(a)} / {_to_float64(b)})",
    "FloatTrueDiv": lambda a, b: f"({a} / {b})",
    "OpaqueUnaryFn_sqrt": lambda a: f"tl.sqrt({a})",
}


#: the printer the Triton codegen makes active (``core.size_printer``) while it generates
triton_size_source = TritonSizePrinter()
