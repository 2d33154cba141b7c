"""An index over one loop variable as consecutive affine pieces, and substitution.

An :class:`~torchstrata.inductor.indexing.Index` over a single variable ``v`` (with
floor-division and modulo atoms) is piecewise affine in ``v``: ``v % 32`` is ``v`` on
``[0, 32)`` and ``v - 32`` on ``[32, 64)``. :func:`affine_pieces` finds those pieces
exactly (as long as there are few), which tells where a comparison of the index with a
constant changes value. :func:`substitute` rewrites an index for a sub-range of the loop
(``v = u + start``), letting the index algebra simplify the atoms that are affine there.
All indices are non-negative, so floor division and modulo agree with C's.
"""

from __future__ import annotations

import attrs

from torchstrata.inductor.indexing import FloorDiv, Index, Mod, Var

#: Most affine pieces an index may have over the loop before it is not analysed.
MAX_PIECES = 64


@attrs.frozen
class Piece:
    """``slope * v + offset`` for ``start <= v < stop``."""

    start: int
    stop: int
    slope: int
    offset: int


def affine_pieces(index: Index, var: Var) -> list[Piece] | None:
    """``index`` over ``0 <= var < var.size`` as consecutive affine pieces.

    None when it reads another variable or has more than :data:`MAX_PIECES` pieces.
    """
    pieces = [Piece(0, var.size, 0, index.const)]
    for atom, coeff in index.terms:
        if isinstance(atom, Var):
            if atom.name != var.name:
                return None
            atom_pieces: list[Piece] | None = [Piece(0, var.size, 1, 0)]
        else:
            base = affine_pieces(atom.base, var)
            atom_pieces = None if base is None else _divide(base, atom)
        if atom_pieces is None:
            return None
        pieces = _combine(pieces, atom_pieces, coeff)
        if len(pieces) > MAX_PIECES:
            return None
    return pieces


def _combine(left: list[Piece], right: list[Piece], coeff: int) -> list[Piece]:
    """``left + coeff * right``, both consecutive pieces over the same range."""
    result, i, j, start = [], 0, 0, 0
    while i < len(left) and j < len(right):
        a, b = left[i], right[j]
        stop = min(a.stop, b.stop)
        result.append(Piece(start, stop, a.slope + coeff * b.slope, a.offset + coeff * b.offset))
        start = stop
        i += a.stop == stop
        j += b.stop == stop
    return result


def _divide(base: list[Piece], atom: FloorDiv | Mod) -> list[Piece] | None:
    """The pieces of ``floor(base / d)`` or ``base % m``, cut where the quotient changes."""
    divisor = atom.divisor if isinstance(atom, FloorDiv) else atom.modulus
    result: list[Piece] = []
    for piece in base:
        a, b = piece.slope, piece.offset
        if a % divisor == 0:  # the quotient is affine too: a*v is a multiple of d
            if isinstance(atom, FloorDiv):
                result.append(Piece(piece.start, piece.stop, a // divisor, b // divisor))
            else:
                result.append(Piece(piece.start, piece.stop, 0, b % divisor))
            continue
        v = piece.start
        while v < piece.stop:
            quotient = (a * v + b) // divisor
            if a > 0:  # first v with a*v + b >= (quotient + 1) * divisor
                following = -((b - (quotient + 1) * divisor) // a)
            else:  # first v with a*v + b < quotient * divisor
                following = (quotient * divisor - b) // a + 1
            stop = min(following, piece.stop)
            if isinstance(atom, FloorDiv):
                result.append(Piece(v, stop, 0, quotient))
            else:
                result.append(Piece(v, stop, a, b - quotient * divisor))
            if len(result) > MAX_PIECES:
                return None
            v = stop
    return result


def substitute(index: Index, name: str, value: Index) -> Index:
    """``index`` with the variable ``name`` replaced by ``value``, simplified again."""
    result = Index.constant(index.const)
    for atom, coeff in index.terms:
        if isinstance(atom, Var):
            part = value if atom.name == name else Index.of(atom)
        elif isinstance(atom, FloorDiv):
            part = substitute(atom.base, name, value).floordiv(atom.divisor)
        else:
            part = substitute(atom.base, name, value).mod(atom.modulus)
        result = result + part * coeff
    return result
