"""Triton launch choices taken on sizes that may be symbolic (issue 33, decision 0400).

A Triton kernel's block sizes (``XBLOCK``, ``RBLOCK``) and warps depend on its sizes only
through the next power of two of each (decision 0225's tuning buckets). In a symbolic
lowering (``core.SizeValue`` sizes) :func:`next_power_of_2` takes that power from the
hint and records, through the size's comparisons, that the size lies in its bucket
(``p/2 < n <= p``): one lowering then serves every size of the bucket with the same
constants, and a size outside it lowers again. :func:`capped_power_of_2` (a block of
rows) records only the bucket's upper bound, and takes one bucket for every size up to a
floor (a GPU's smallest tile): fewer rows take the same block, masked.

On a GPU Triton compiles a kernel per specialisation of its integer arguments (a value of
1, a multiple of 16) at its first launch with them. A symbolic kernel's symbols and a
reduction's rows are not specialised on (``do_not_specialize``: the divisibility of a
row's length or of a pointwise kernel's elements is what lets masked loads be vectors),
but for a column sum, whose loads run along its rows (the columns), the row length
instead (a weight gradient's reduced rows: :func:`column_sum`, decision 0440);
:func:`record_specialisation` makes the others' specialisation a condition of the
lowering, so that every size it serves launches the binary compiled for its first size,
and no later size can meet a compile of its own.
"""

from __future__ import annotations

from collections.abc import Iterable

from torchstrata.core import SizeValue, active_symbols
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.columns import is_column_reduction

#: Triton's divisibility specialisation of integer arguments (``tt.divisibility=16``).
TRITON_DIVISIBILITY = 16


def _power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def next_power_of_2(n: int | SizeValue) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1); for a symbolic size, that of
    its hint, with its bucket recorded as conditions of the lowering."""
    if type(n) is not SizeValue:
        return _power_of_2(n)  # type: ignore[arg-type]
    power = _power_of_2(n.hint)
    if not n <= power or (power > 1 and not n > power // 2):
        raise AssertionError(f"{n} is outside the bucket of its hint {n.hint}")
    return power


def capped_power_of_2(n: int | SizeValue, cap: int, floor: int = 1) -> int:
    """``min(next_power_of_2(n), cap)`` (``cap`` a power of two), for a block of rows
    whose masks keep its extra rows out. A symbolic size records only ``n <= p`` where
    the hint's power ``p`` is below ``cap`` (smaller sizes take the same block, masked),
    and takes at least ``floor`` (a power of two): every size up to it is one bucket."""
    if type(n) is not SizeValue:
        return min(_power_of_2(n), cap)  # type: ignore[arg-type]
    power = min(max(_power_of_2(n.hint), floor), cap)
    if power < cap and not n <= power:
        raise AssertionError(f"{n} is above the bucket of its hint {n.hint}")
    return power


def record_specialisation(values: Iterable[int | SizeValue]) -> None:
    """Record, for each symbolic one of ``values`` (a compiled kernel's integer
    arguments), whether it is 1 and whether 16 divides it: Triton's key of the binary."""
    for value in values:
        if type(value) is SizeValue:
            bool(value == 1)
            bool(value % TRITON_DIVISIBILITY == 0)


def hint(value: int | SizeValue) -> int:
    """The value of ``value`` in the call being lowered (for cache keys and compiles
    ahead, which decide nothing about the sizes served)."""
    return value.hint if type(value) is SizeValue else value  # type: ignore[return-value]


def symbol_params() -> tuple[str, ...]:
    """The names of the symbols of the symbolic lowering in progress (empty outside one):
    every Triton kernel of it takes them after its size parameters, as the C++ kernels
    do (decision 0382), not specialised on by Triton (``do_not_specialize``)."""
    return tuple(str(symbol) for symbol in active_symbols())


def same_size(a: int | SizeValue, b: int | SizeValue) -> bool:
    """Whether ``a`` and ``b`` are one size at every size the lowering serves: for
    symbolic sizes, the same expression (no condition recorded: sizes that are equal
    only at some sizes are named apart, as two keys of a dict of sizes are)."""
    if type(a) is SizeValue or type(b) is SizeValue:
        return type(a) is type(b) and a.expr == b.expr  # type: ignore[union-attr]
    return a == b


def column_sum(kernel: Kernel) -> bool:
    """Whether ``kernel`` is a GPU column sum (its loads contiguous along its rows, none
    along the reduced dims: ``is_column_reduction(unanimous=True)``): its tiles loop over
    the row length 8-32 elements at a time, and the divisibility of its rows, not of its
    row length, is what lets masked loads be vectors (decision 0440)."""
    return bool(kernel.red_shape) and is_column_reduction(kernel, unanimous=True)
