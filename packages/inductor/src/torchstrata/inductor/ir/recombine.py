"""Recombining an index's quotients and remainders into fewer divisions (decision 0521).

A kernel that derives one variable per dim from a flat position (``x1 = (xi // 128) %
256``, ``x2 = xi % 128``) and indexes with ``128*x1 + x2`` divides twice for what is
``xi % 32768``. With each variable replaced by its definition over the flat position
(:func:`substitute`), :func:`recombine` folds the digits back together:

* ``k*d*(b // d) + k*(b % d) == k*b`` (the top digit: a contiguous access is ``b``);
* ``k*d*((b // d) % m) + k*(b % d) == k*(b % (d*m))`` (a run of digits: a broadcast
  operand's suffix is one remainder);
* ``(b % a) % m == b % m`` where ``m`` divides ``a`` (more generally a term ``k*(b % a)``
  of a remainder by ``m`` is ``k*b`` there when ``m`` divides ``k*a``);
* ``(b // a) // d == b // (a*d)``.

Each holds for every non-negative ``b`` and positive sizes, so also for symbolic ones
(``core.SizeValue``): terms are matched by expression (a coefficient equal to ``k*d`` at
one size only is not matched, and decides nothing), never by value. In a symbolic
lowering (``core.sizes_symbolic``) the quotients and remainders these build are atoms as
written, not simplified by the ranges of their bases: that simplification compares
bounds with sizes, which records a guard wherever sympy cannot decide it (``4*floor(s0/3)
- 1 < 4``: a rows dim of ``s0 // 3`` pinned to one or more rows, decision 0480).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from torchstrata.core import compared_by_expression, same_size, sizes_symbolic
from torchstrata.inductor.ir.indexing import Atom, FloorDiv, Index, Mod, Var, row_major_strides


def recombine(index: Index) -> Index:
    """``index`` with the identities of the module docstring applied, inside the bases of
    its atoms too: never more divisions and remainders (:func:`div_mod_count`) than it had."""
    return _recombine(index, sizes_symbolic())


def substitute(index: Index, mapping: Mapping[str, Index]) -> Index:
    """``index`` with each variable named in ``mapping`` replaced by its value (all at
    once), simplified by the index algebra, then :func:`recombine`-d."""
    key = tuple(sorted(mapping.items(), key=lambda item: item[0]))
    return _substitute(index, key, sizes_symbolic())


def row_major_digits(flat: Var, sizes: Sequence[int]) -> list[Index]:
    """The multi-index of ``sizes`` whose row-major position is ``flat``, as the Triton
    backend derives it (``flat // stride`` for the leading dim, ``(flat // stride) % size``
    for the others): simplified by ranges, or, in a symbolic lowering, as written (see the
    module docstring)."""
    symbolic = sizes_symbolic()
    position = Index.of(flat)
    digits = []
    for dim, (size, stride) in enumerate(zip(sizes, row_major_strides(sizes), strict=True)):
        value = position if same_size(stride, 1) else _quotient(position, stride, symbolic)
        digits.append(_remainder(value, size, symbolic) if dim else value)
    return digits


def _quotient(base: Index, divisor: int, symbolic: bool) -> Index:
    """``base // divisor``: simplified, or in a symbolic lowering the atom as written."""
    return Index.of(FloorDiv(base, divisor)) if symbolic else base.floordiv(divisor)


def _remainder(base: Index, modulus: int, symbolic: bool) -> Index:
    """``base % modulus``, as :func:`_quotient`."""
    return Index.of(Mod(base, modulus)) if symbolic else base.mod(modulus)


def div_mod_count(index: Index) -> int:
    """How many floor divisions and remainders computing ``index`` takes."""
    return _count(index, sizes_symbolic())


@functools.lru_cache(maxsize=1 << 16)
def _count(index: Index, symbolic: bool) -> int:
    # memoised: the Triton printer counts every index of a kernel in both its forms
    return sum(
        0 if isinstance(atom, Var) else 1 + _count(atom.base, symbolic) for atom, _ in index.terms
    )


@functools.lru_cache(maxsize=1 << 16)
def _substitute(index: Index, mapping: tuple[tuple[str, Index], ...], symbolic: bool) -> Index:
    # memoised per (index, mapping): a kernel's loads share their atoms' bases
    values = dict(mapping)
    result = Index.constant(index.const)
    for atom, coeff in index.terms:
        if isinstance(atom, Var):
            part = values.get(atom.name, Index.of(atom))
        elif isinstance(atom, FloorDiv):
            part = _quotient(_substitute(atom.base, mapping, symbolic), atom.divisor, symbolic)
        else:
            part = _remainder(_substitute(atom.base, mapping, symbolic), atom.modulus, symbolic)
        result = result + part * coeff
    return _recombine(result, symbolic)


@functools.lru_cache(maxsize=1 << 16)
def _recombine(index: Index, symbolic: bool) -> Index:
    """:func:`recombine`, memoised (every memo of the index algebra is keyed by
    ``symbolic``: ``core.sizes_symbolic``, decision 0381). Linear in the index's atoms but
    for the digit merges, which each remove a term (at most as many passes as terms)."""
    with compared_by_expression():
        result = Index.constant(index.const)
        for atom, coeff in index.terms:
            result = result + _atom(atom, symbolic) * coeff
        while True:
            merged = _merge_digits(result, symbolic)
            if merged is None:
                return result
            result = merged


def _atom(atom: Atom, symbolic: bool) -> Index:
    """One atom with its base recombined, and a division of a division or a remainder of
    remainders folded (the two nested rules of the module docstring)."""
    if isinstance(atom, Var):
        return Index.of(atom)
    base = _recombine(atom.base, symbolic)
    if isinstance(atom, FloorDiv):
        inner = _single(base)
        if isinstance(inner, FloorDiv):  # (b // a) // d == b // (a*d)
            divisor = inner.divisor * atom.divisor
            return _recombine(_quotient(inner.base, divisor, symbolic), symbolic)
        return Index.of(atom) if base == atom.base else _quotient(base, atom.divisor, symbolic)
    stripped = _strip_remainders(base, atom.modulus)
    if stripped is not None:
        return _recombine(_remainder(stripped, atom.modulus, symbolic), symbolic)
    return Index.of(atom) if base == atom.base else _remainder(base, atom.modulus, symbolic)


def _single(index: Index) -> Atom | None:
    """The atom ``a`` when ``index`` is exactly ``a`` (coefficient 1, no constant)."""
    if len(index.terms) == 1 and same_size(index.terms[0][1], 1) and same_size(index.const, 0):
        return index.terms[0][0]
    return None


def _strip_remainders(base: Index, modulus: int) -> Index | None:
    """``base`` with each term ``k*(b % a)`` whose ``k*a`` ``modulus`` divides (by
    expression) replaced by ``k*b``, which is the same modulo ``modulus``; None when
    there is none."""
    stripped = Index.constant(base.const)
    found = False
    for atom, coeff in base.terms:
        if isinstance(atom, Mod) and same_size((coeff * atom.modulus) % modulus, 0):
            stripped = stripped + atom.base * coeff
            found = True
        else:
            stripped = stripped + Index(((atom, coeff),), 0)
    return stripped if found else None


def _merge_digits(index: Index, symbolic: bool) -> Index | None:
    """``index`` with one remainder ``k*(b % d)`` merged with the digit above it (``k*d*(b
    // d)`` or ``k*d*((b // d) % m)``, ``b // d`` as built and recombined here: a
    digit of a digit, ``(c // a) % d``, has ``c // (a*d)`` above it), or None when no pair
    matches."""
    coeffs = dict(index.terms)
    above: dict[Atom, Mod] = {}  # (b // d) -> the digit (b // d) % m over it
    for atom in coeffs:
        if isinstance(atom, Mod):
            inner = _single(atom.base)
            if isinstance(inner, FloorDiv):
                above[inner] = atom
    for atom, coeff in index.terms:
        if not isinstance(atom, Mod):
            continue
        quotient = _single(_recombine(_quotient(atom.base, atom.modulus, symbolic), symbolic))
        scaled = coeff * atom.modulus
        if quotient is None:
            continue
        if quotient in coeffs and same_size(coeffs[quotient], scaled):
            return _replaced(index, (atom, quotient), atom.base * coeff)
        digit = above.get(quotient)
        if digit is not None and same_size(coeffs[digit], scaled):
            merged = _remainder(atom.base, atom.modulus * digit.modulus, symbolic) * coeff
            return _replaced(index, (atom, digit), merged)
    return None


def _replaced(index: Index, removed: tuple[Atom, Atom], added: Index) -> Index:
    """``index`` less the terms of ``removed``, plus ``added``."""
    result = Index.constant(index.const)
    for atom, coeff in index.terms:
        if atom not in removed:
            result = result + Index(((atom, coeff),), 0)
    return result + added
