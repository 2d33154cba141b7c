"""What the range of one loop variable says about index expressions and comparisons.

An :class:`~torchstrata.inductor.ir.indexing.Index` over a single variable ``v`` (with
floor-division and modulo atoms) is piecewise affine in ``v``: ``v % 32`` is ``v`` on
``[0, 32)`` and ``v - 32`` on ``[32, 64)``. :func:`affine_pieces` finds those pieces
exactly (as long as there are few), and :func:`condition_runs` uses them to find the runs
of ``v`` over which a comparison of index values (a cat's ``x3 < 32``, also through
``%``/``//``) keeps one value. :func:`substitute` rewrites an index for a sub-range of the
loop (``v = u + start``), letting the index algebra simplify the atoms that are affine
there; :func:`decide_comparison` folds a comparison that the bounds of its operands
decide. All indices are non-negative, so floor division and modulo agree with C's.

Backend-neutral; used by the C++ backend to split an inner loop into contiguous ranges
(:mod:`~torchstrata.inductor.codegen.cpp.ranges`) and by the Triton backend to unwrap the index
of a load guarded by a ``where`` condition (:mod:`~torchstrata.inductor.codegen.triton.branch_loads`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import attrs
import torch

from torchstrata.core import SizeValue
from torchstrata.inductor.ir.exprs import Constant, Expr, IndexValue, Op
from torchstrata.inductor.ir.indexing import FloorDiv, Index, Mod, Var

#: Most affine pieces an index may have over the loop before it is not analysed.
MAX_PIECES = 64

#: The comparison ops that the analysis understands, by name, with their Python meaning.
COMPARISONS: dict[str, Callable[[int, int], bool]] = {
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "eq": operator.eq,
    "ne": operator.ne,
}


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


def condition_runs(op: Op, var: Var) -> list[tuple[int, bool]] | None:
    """The comparison ``op`` over ``0 <= var < var.size``: (start, value) of each run of
    positions where it keeps one value, in order.

    Only comparisons of integer index values and constants whose difference depends on
    ``var`` alone, with few enough affine pieces (:func:`affine_pieces`), are analysed;
    None for any other op.
    """
    compare = COMPARISONS.get(op.name)
    difference = _difference(op) if compare is not None else None
    if compare is None or difference is None or difference.variables() != {var.name}:
        return None
    pieces = affine_pieces(difference, var)
    if pieces is None:
        return None
    runs: list[tuple[int, bool]] = []
    for piece in pieces:
        # Within a piece the value is affine, so "value < t" flips at most once per t;
        # every comparison with 0 is decided by "value < 0" and "value < 1".
        starts = {piece.start} | {
            p for t in (0, 1) if piece.start < (p := _crossing(piece, t)) and _before(p, piece)
        }
        for start in sorted(starts):
            value = compare(piece.slope * start + piece.offset, 0)
            if not runs or runs[-1][1] != value:
                runs.append((start, value))
    return runs


def _before(position: int, piece: Piece) -> bool:
    """Whether a run starting at ``position`` lies in ``piece``. A symbolic one may be
    empty (at its stop: a roll's wrapped run at 2 rows), which every user of the runs
    reads right (an empty loop range, a masked load), where deciding ``position <
    stop`` would split the lowering at the sizes that make it empty (decision 0480)."""
    if type(position) is SizeValue or type(piece.stop) is SizeValue:
        return position <= piece.stop
    return position < piece.stop


def _crossing(piece: Piece, threshold: int) -> int:
    """The first ``v`` where ``slope * v + offset < threshold`` may change (or -1)."""
    if piece.slope > 0:
        return -((piece.offset - threshold) // piece.slope)  # ceil((t - offset) / slope)
    if piece.slope < 0:
        return (threshold - piece.offset) // piece.slope + 1
    return -1


def decide_comparison(op: Op) -> bool | None:
    """The value of the comparison ``op`` (one of :data:`COMPARISONS`) when the bounds of
    its operands decide it, else None (also for operands that are not index values)."""
    difference = _difference(op)
    if difference is None:
        return None
    compare = COMPARISONS[op.name]
    low, high = difference.bounds()
    if op.name in ("eq", "ne"):
        decided = low == high or low > 0 or high < 0
    else:  # monotone in the difference: decided when both ends agree
        decided = compare(low, 0) == compare(high, 0)
    return compare(low, 0) if decided else None


def _as_index(expr: Expr) -> Index | None:
    """An integer index value or constant as an :class:`Index` (None for anything else).

    An index value must fit its dtype, so that the cast that computes it cannot wrap.
    """
    if expr.dtype is torch.bool or expr.dtype.is_floating_point or expr.dtype.is_complex:
        return None
    if isinstance(expr, Constant):
        value = expr.value  # an int, or a symbolic size (decision 0381)
        return Index.constant(value if isinstance(value, SizeValue) else int(value))
    if isinstance(expr, IndexValue):
        low, high = expr.index.bounds()
        info = torch.iinfo(expr.dtype)
        return expr.index if info.min <= low and high <= info.max else None
    return None


def _difference(op: Op) -> Index | None:
    """``a - b`` for a comparison ``op(a, b)`` of index values and constants."""
    left, right = (_as_index(arg) for arg in op.args)
    if left is None or right is None:
        return None
    return left + right * -1
