"""Triton source of a symbolic size with floor division or modulo in it (decision 0438).

A Triton kernel of a symbolic lowering takes the lowering's symbols as integer arguments
(decision 0400) and prints sizes over them: ``x1 + (s0//2)*x0``. Sizes are sympy
expressions whose ``floor`` and ``Mod`` floor, as Python's ``//`` and ``%`` do; Triton's
integer ``//`` and ``%`` follow C (truncating toward zero) when compiled. They agree
where the dividend is non-negative and the divisor positive, which the sizes' being
integers >= 2 decides for ``s0 // 2``, ``(s0 + 1) // 2`` and ``Mod(1, s0)``; only those
print, and ``Max``/``Min`` as ``tl.maximum``/``tl.minimum``. A dividend whose sign is
not known raises :class:`~torchstrata.core.UnprintableSize`: the site reads the size,
and the sizes lower as before (on their own).
"""

from __future__ import annotations

from typing import Any

from torchstrata.core import SourcePrinter, UnprintableSize


class TritonSizePrinter(SourcePrinter):
    """Triton (and Python) source of a size expression where both languages' ``//`` and
    ``%`` agree on it."""

    def floordiv(self, numerator: Any, denominator: Any) -> str:
        """See :class:`~torchstrata.core.SourcePrinter`."""
        if not self.truncates_alike(numerator, denominator):
            raise UnprintableSize(f"{numerator} // {denominator}: a dividend of any sign")
        return f"({self.print(numerator)} // {self.print(denominator)})"

    def mod(self, value: Any, modulus: Any) -> str:
        """See :class:`~torchstrata.core.SourcePrinter`."""
        if not self.truncates_alike(value, modulus):
            raise UnprintableSize(f"Mod({value}, {modulus}): a value of any sign")
        return f"({self.print(value)} % {self.print(modulus)})"

    def pair(self, largest: bool, a: str, b: str) -> str:
        """See :class:`~torchstrata.core.SourcePrinter`: ``tl.maximum`` / ``tl.minimum``
        of the kernel's integer scalars (a contiguous stride ``Max(1, s0//2)``)."""
        return f"{'tl.maximum' if largest else 'tl.minimum'}({a}, {b})"


#: the printer the Triton codegen makes active (``core.size_printer``) while it generates
triton_size_source = TritonSizePrinter()
