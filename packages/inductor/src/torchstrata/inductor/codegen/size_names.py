"""Sizes spelled as the kernel's size arguments where generated code prints them.

A kernel that takes a size as an argument (a C++ row kernel's reduced length ``red_len``)
prints that argument's name wherever an index coefficient, an index constant or a loop
bound equals its value, instead of the literal: ``red_len*x0 + r0`` rather than ``17*x0 +
r0``, so kernels that differ only in that size are one source (decision 0250).

Correct by construction, whatever matches: the launch passes the value the generator
replaced, so the text with each name read as its value is the literal source; a value
that equals the size by coincidence is the same number either way. What is not printed
through :func:`number` (array lengths, decisions) stays a literal, and so do divisors and
moduli, except those that :func:`divisor` names: a cat's bounds and extents (decision
0285), where the division is outside the kernel's SIMD loop (a runtime divisor there would
cost its vectorisation).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar

from torchstrata.core import SizeValue

_NAMES: ContextVar[Mapping[int, str] | None] = ContextVar("size_names", default=None)
_DIVISORS: ContextVar[tuple[Mapping[int, str], frozenset[str]] | None] = ContextVar(
    "size_divisors", default=None
)


@contextlib.contextmanager
def named_sizes(
    names: Mapping[int, str],
    divisors: Mapping[int, str] | None = None,
    inner: frozenset[str] = frozenset(),
) -> Iterator[None]:
    """Within the block, :func:`number` prints each value of ``names`` as its name, and
    :func:`divisor` each value of ``divisors`` where the divided index reads none of the
    ``inner`` loop variables."""
    token = _NAMES.set(dict(names))
    divisor_token = _DIVISORS.set((dict(divisors or {}), inner))
    try:
        yield
    finally:
        _DIVISORS.reset(divisor_token)
        _NAMES.reset(token)


def number(value: int | SizeValue) -> str:
    """``value`` as generated code prints it: a size argument's name, or the literal."""
    names = _NAMES.get()
    if names is None:
        return str(value)
    if value < 0 and -value in names:  # a piece's offset: ``x1 + -8*cat1``
        return f"-{names[-value]}"
    return names.get(value, str(value))  # type: ignore[arg-type]  # a SizeValue key (0381)


def named_integer(value: object, floating: bool) -> str | None:
    """What :func:`number` prints for an integer constant ``value`` of a non-floating
    dtype where that is a size argument's name (a cat's bound), else None (a literal)."""
    if floating or not isinstance(value, int | SizeValue) or isinstance(value, bool):
        return None
    text = number(value)
    return None if text == str(value) else text


def divisor(value: int, variables: frozenset[str]) -> str:
    """A divisor or modulus ``value`` of an index over ``variables`` as generated code
    prints it: a size argument's name (parenthesised where not one term), or the literal.
    A division whose index reads an inner (SIMD) loop variable keeps its literal."""
    found = _DIVISORS.get()
    if found is None or value not in found[0] or variables & found[1]:
        return str(value)
    text = found[0][value]
    return text if text.isidentifier() or text.startswith("(") else f"({text})"


def value_of(name: str) -> int | None:
    """The value that :func:`number` prints as ``name`` within the block, or None."""
    names = _NAMES.get()
    if names is None:
        return None
    return next((value for value, named in names.items() if named == name), None)
