"""Sizes spelled as the kernel's size arguments where generated code prints them.

A kernel that takes a size as an argument (a C++ row kernel's reduced length ``red_len``)
prints that argument's name wherever an index coefficient, an index constant or a loop
bound equals its value, instead of the literal: ``red_len*x0 + r0`` rather than ``17*x0 +
r0``, so kernels that differ only in that size are one source (decision 0250).

Correct by construction, whatever matches: the launch passes the value the generator
replaced, so the text with each name read as its value is the literal source; a value
that equals the size by coincidence is the same number either way. What is not printed
through :func:`number` (divisors, moduli, array lengths, decisions) stays a literal.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar

_NAMES: ContextVar[Mapping[int, str] | None] = ContextVar("size_names", default=None)


@contextlib.contextmanager
def named_sizes(names: Mapping[int, str]) -> Iterator[None]:
    """Within the block, :func:`number` prints each value of ``names`` as its name."""
    token = _NAMES.set(dict(names))
    try:
        yield
    finally:
        _NAMES.reset(token)


def number(value: int) -> str:
    """``value`` as generated code prints it: a size argument's name, or the literal."""
    names = _NAMES.get()
    return str(value) if names is None else names.get(value, str(value))
