"""A row's reduction scaled by its own length: the length printed as the size argument.

A mean (``sum / n``), a LayerNorm's mean and variance and an RMSNorm's mean square divide
a row's reduction by the row's length, a float constant in the kernel's IR (the decomp's
``ctx.count``, decision 0280): one source per length. Where a ``div`` of a reduction's
result (a :class:`~torchstrata.inductor.ir.exprs.ReduceRef`, itself or cast) has a
float32/float64 divisor equal to the kernel's reduced length, or a ``mul`` a factor equal
to its reciprocal (the double ``1 / n``), the backends print the constant from their
reduced-length argument (``red_len``, ``rnumel``) instead of the literal (decision 0286).

Which constants: only those that scale the row's reduction, the shape the decomposition
of a count gives; a constant elsewhere equal to the length keeps its literal. Correct by
construction as the names of :mod:`~torchstrata.inductor.codegen.size_names` are: each
lowering prints its own kernel from its own sizes and passes the length it replaced, so the
text read with the argument's value is that size's literal source, bit for bit (the length
converted to the float type is the literal's float; the reciprocal is computed in double,
then rounded as the literal was). A constant equal to the length at one size only (not a
count) is the same number at that size, and a literal (another source) at the others.
Per row, not per element: the operand is a row's reduction, used after its loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from torchstrata.core import SizeValue
from torchstrata.inductor.ir.exprs import Constant, Expr, Op, ReduceRef

#: Float types whose constants are printed from a length (16-bit floats compute in float).
_FLOATS = (torch.float32, torch.float64)


def _is_reduction(expr: Expr) -> bool:
    while isinstance(expr, Op) and expr.name == "convert_element_type":
        expr = expr.args[0]
    return isinstance(expr, ReduceRef)


def length_constant(op: Op, length: int | None) -> tuple[int, bool, int] | None:
    """``(position, reciprocal, less)`` of ``op``'s constant operand that is the reduced
    ``length`` less ``less`` (``reciprocal``: ``1 / (length - less)``) scaling a row's
    reduction, or None. ``less`` is 1 for an unbiased variance's ``n - 1`` (``torch.var``,
    ``torch.std`` with ``correction=1``: decision 0340), taken where ``n - 1`` is at least
    2 (a divisor 1.0 is no count). A symbolic length (decision 0381) is no float
    constant's count: a constant equal to it at one size differs at the others."""
    if length is None or type(length) is SizeValue:
        return None
    if length < 2 or op.name not in ("div", "mul") or len(op.args) != 2:
        return None
    for position in (1,) if op.name == "div" else (0, 1):
        constant, other = op.args[position], op.args[1 - position]
        if not isinstance(constant, Constant) or constant.dtype not in _FLOATS:
            continue
        value = constant.value
        if isinstance(value, bool) or not isinstance(value, float) or not _is_reduction(other):
            continue
        for less in (0, 1) if length >= 3 else (0,):
            count = length - less
            if op.name == "div" and value == float(count):
                return position, False, less
            if op.name == "mul" and value == 1.0 / count:
                return position, True, less
    return None


def length_text(name: str, less: int) -> str:
    """The text of the count :func:`length_constant` found, from the length's argument
    ``name``: ``name`` itself or ``(name - 1)``."""
    return f"({name} - {less})" if less else name


#: The smallest count :func:`count_constant` prints from the size arguments: ``2.0`` and
#: ``0.5`` are the commonest constants of all (a square's derivative, GELU's half); at a
#: count of 2 they would be read from it, a source of its own for a coincidence.
MIN_COUNT = 3
#: Constants never read from a count: a variance backward's ``2 / (n - 1)`` is ``0.5`` at
#: ``n = 5`` (GELU's half in a column sum over 5 rows was printed from ``red_rows``). Since
#: per-element factors are never ``2 / (n - 1)`` (decision 0392) this is what keeps a half of
#: a per-row value (``0.5 * sum(x)`` over rows of 5) a literal: no test of the operand tells
#: it from a variance's backward, whose gradient is per row too.
COMMON = frozenset({0.5, 2.0})


def count_constant(
    op: Op, counts: Mapping[int, str], per_element: Callable[[Expr], bool]
) -> tuple[int, str, float | None] | None:
    """``(position, count, numerator)`` of ``op``'s float constant operand equal to one
    of the kernel's ``counts`` (an element count the kernel takes as size arguments: its
    value -> the text computing it from them; ``numerator`` None), or to its reciprocal
    (the double ``1 / n``; ``numerator`` 1.0), or None (decision 0310). An unbiased
    variance's ``n - 1`` is a count too where it is at least :data:`MIN_COUNT` (``count``
    is then ``(n - 1)``): as a divisor, its reciprocal, and its backward's factor ``2 / (n - 1)``
    (``numerator`` 2.0): decision 0340. A mean's backward divides its incoming gradient by the
    count (``g / (T*C)``), a LayerNorm's backward scales per-element values by its row
    length (``n * dy*w``) and divides a saved per-row value by it (``rstd / n``).

    A ``mul`` by the count or its reciprocal stays a product (by a loop-invariant value);
    a ``div`` is taken only where its dividend is not ``per_element``: a per-element
    division by a literal power of two is compiled as a product, by a run-time value it
    would stay a division. The factor ``2 / (n - 1)`` is taken only where the value it
    scales is not ``per_element`` either (decision 0360, for every backend since 0392): the
    variance's backward scales the row's incoming gradient, a value per row; a per-element
    factor equal to it is a coincidence (GELU's ``0.5`` in rows of 5), a source of its own.
    Correct whatever matches, as :func:`length_constant` is: the launch passes the sizes
    the count is computed from, and a coincidence (a factor ``3.0`` in rows of 3 elements)
    prints the same number. Counts under :data:`MIN_COUNT` are never printed from the
    arguments.
    """
    if op.name not in ("div", "mul") or len(op.args) != 2:
        return None
    for position in (1,) if op.name == "div" else (0, 1):
        constant, other = op.args[position], op.args[1 - position]
        if not isinstance(constant, Constant) or constant.dtype not in _FLOATS:
            continue
        value = constant.value  # an integral float constant may hold a Python int
        if isinstance(value, bool) or not isinstance(value, int | float) or value in COMMON:
            continue
        if op.name == "div" and per_element(other):
            continue
        for count, text in counts.items():
            if type(count) is SizeValue:
                # a float constant of a symbolic graph holds no size (one that did would
                # be a SizeFloat, no ``float``: decision 0500): equal to a symbolic count
                # only by coincidence at one size (decision 0381)
                continue
            if count < MIN_COUNT:
                continue
            forms: list[tuple[int, str, tuple[float, ...]]] = [(count, text, (1.0,))]
            if count - 1 >= MIN_COUNT:  # an unbiased variance's ``n - 1`` (decision 0340)
                forms.append((count - 1, f"({text} - 1)", (1.0, 2.0)))
            for number, spelled, numerators in forms:
                # ``n - 1`` itself only as a divisor: a factor ``3.0`` over rows of 4 stays
                if value == number and (number == count or op.name == "div"):
                    return position, spelled, None
                for numerator in numerators if op.name == "mul" else ():
                    if value == numerator / number and (numerator == 1.0 or not per_element(other)):
                        return position, spelled, numerator
    return None
