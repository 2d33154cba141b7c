"""A cat's bounds as size arguments: ``x1 < cat0`` rather than ``x1 < 17``.

A cat lowers to ``where`` over the position along its dim, compared with each piece's end
(:func:`~torchstrata.inductor.schedule.index_fns.cat_fn`), each piece read at its position
modulo its length. Appending a token to a KV cache of ``T`` rows (``[2, T, 32]`` and ``[2,
1, 32]`` into ``[2, T + 1, 32]``) printed ``T`` in the comparison and the modulo, ``T + 1``
in the row split, and ``32*T`` and ``32*(T + 1)`` as row strides: a source per ``T``.

Here a kernel whose values compare the position of one of its row variables with an
integer constant (a cat's bound; also ``arange(T) < T // 2``) takes those constants and
the variable's extent as size arguments ``cat0, cat1, ...`` (sorted, values of 2 and more),
and the generated code prints them, the lengths between them (a piece's, ``(cat1 -
cat0)``, and the shift that keeps a piece's reads in bounds, ``((cat1 - cat0) - cat0)``)
and each of those times the size of the dims after the variable (``32*cat0``, a row
stride) as these names: in index coefficients and constants, loop bounds and integer
constants, and as divisors and moduli outside the SIMD loop
(:mod:`~torchstrata.inductor.codegen.size_names`).

Correct by construction (decision 0250): the launch passes the values the names replaced,
so the source read with them is the literal source of that size, whatever matched.
Backend-neutral: the C++ and Triton backends print row kernels under these names.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

from torchstrata.core import SizeValue
from torchstrata.inductor.ir.exprs import Constant, Expr, IndexValue, Op, walk
from torchstrata.inductor.ir.indexing import Var
from torchstrata.inductor.ir.kernel import Kernel, row_vars
from torchstrata.inductor.ir.ranges import COMPARISONS

#: The prefix of the size parameters holding a kernel's cat bounds (``cat0``, ``cat1``...).
CAT_PARAM = "cat"


def _roots(kernel: Kernel) -> Iterable[Expr]:
    yield from (spec.body for spec in kernel.reductions)
    yield from (store.value for store in (*kernel.row_stores, *kernel.full_stores))


def _compared(op: Op, rows: dict[str, int]) -> tuple[str, int] | None:
    """``(variable, constant)`` when ``op`` compares a row variable's position with an
    integer constant, either way round."""
    if op.name not in COMPARISONS or len(op.args) != 2:
        return None
    for position, other in (op.args, op.args[::-1]):
        if not (isinstance(position, IndexValue) and isinstance(other, Constant)):
            continue
        if isinstance(other.value, bool) or not isinstance(other.value, int | SizeValue):
            continue
        index = position.index
        if index.const or len(index.terms) != 1:
            continue
        ((atom, coeff),) = index.terms
        if isinstance(atom, Var) and coeff == 1 and atom.name in rows:
            return atom.name, other.value
    return None


def _bounds(kernel: Kernel) -> dict[str, set[int]]:
    """The constants each row variable's position is compared with."""
    if kernel.parts or kernel.tail is not None or kernel.partials is not None:
        return {}
    # the innermost dim is the SIMD loop's (C++ splits it at literal bounds): not named
    rows = {var.name: position for position, var in enumerate(row_vars(kernel.row_shape)[:-1])}
    found: dict[str, set[int]] = {}
    seen: set[Expr] = set()
    for root in _roots(kernel):
        for node in walk(root):
            if node in seen or not isinstance(node, Op):
                continue
            seen.add(node)
            compared = _compared(node, rows)
            if compared is not None:
                found.setdefault(compared[0], set()).add(compared[1])
    return found


def cat_sizes(kernel: Kernel) -> tuple[int, ...]:
    """The values of ``kernel``'s cat size arguments (``cat0, cat1, ...``, in this order):
    for each row variable (in order) whose position a value compares with constants,
    those constants and the variable's extent, sorted, each at least 2, each once."""
    found = _bounds(kernel)
    values: list[int] = []
    for var in row_vars(kernel.row_shape):
        if var.name in found:
            values += [
                v for v in sorted(found[var.name] | {var.size}) if v >= 2 and v not in values
            ]
    return tuple(values)


def cat_params(kernel: Kernel) -> tuple[str, ...]:
    """The names of :func:`cat_sizes`: ``cat0, cat1, ...``."""
    return tuple(f"{CAT_PARAM}{i}" for i in range(len(cat_sizes(kernel))))


def cat_names(kernel: Kernel) -> dict[int, str]:
    """How generated code spells the values that ``kernel``'s cat size arguments give
    (see the module docstring): each argument, the length between consecutive ones of a
    variable, and each of those times the size of the row dims after the variable (and,
    in a reduction, times the row length too). The first name given to a value is kept."""
    sizes = cat_sizes(kernel)
    if not sizes:
        return {}
    param = dict(zip(sizes, cat_params(kernel), strict=True))
    found = _bounds(kernel)
    shape = kernel.row_shape
    named: dict[int, str] = dict(param.items())
    lengths: list[tuple[int, str, int]] = []  # (value, text, position of the variable)
    for position, var in enumerate(row_vars(shape)):
        if var.name not in found:
            continue
        points = sorted(p for p in found[var.name] | {var.size} if p >= 1)
        text_of = {p: param.get(p, str(p)) for p in points}  # a bound of 1 is a literal
        lengths += [(p, param[p], position) for p in points if p in param]
        pieces = [
            (low, high, f"({text_of[high]} - {text_of[low]})")
            for low, high in itertools.pairwise(points)
        ]
        lengths += [(high - low, text, position) for low, high, text in pieces]
        # a piece read at ``(x + length - begin) % length`` (cat_fn keeps every read in
        # bounds) where it begins before its length
        lengths += [
            (high - 2 * low, f"({text} - {text_of[low]})", position)
            for low, high, text in pieces
            if 0 < low < high - low
        ]
    lengths = [length for length in lengths if length[0] >= 2]
    for value, text, _ in lengths:
        named.setdefault(value, text)
    for value, text, position in lengths:
        inner = math.prod(shape[position + 1 :])
        for factor in (inner, inner * kernel.row_length if kernel.red_shape else 0):
            if factor >= 2:
                named.setdefault(value * factor, f"{factor}*{text}")
    # the dims after a cat's (head dims, typically static) and their strides keep their
    # literals: a size equal to one by coincidence gets a source of its own, not a
    # run-time SIMD trip count or stride
    first = min(position for _, _, position in lengths) if lengths else len(shape)
    kept = {math.prod(shape[j:]) for j in range(first + 1, len(shape))} | set(shape[first + 1 :])
    if kernel.red_shape:
        kept |= {kernel.row_length * k for k in kept | {1}}
    return {value: text for value, text in named.items() if value not in kept}
