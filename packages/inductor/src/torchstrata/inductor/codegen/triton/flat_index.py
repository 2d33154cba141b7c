"""Indices over a Triton kernel's flat ``xindex``/``rindex`` where that divides less
(decision 0521).

A kernel derives one variable per dim from its flat index (:func:`derive_lines`: ``x1 =
(xindex // 32768) % 4``...) and prints each access over them. RoPE's load of ``q`` over
``[2, 4, 256, 128]``, ``131072*x0 + 32768*x1 + 128*x2 + x3``, is ``xindex``, and its
``cos`` at ``128*x2 + x3`` is ``xindex % 32768``: :class:`FlatIndices` replaces each
variable by its definition over the flat index, recombines the digits
(:func:`~torchstrata.inductor.ir.recombine.recombine`) and keeps whichever form takes
fewer divisions and remainders, counting those that derive the variables the per-dim form
reads. :func:`without_unused` then drops the derived variables nothing reads. At sizes that
are not powers of two each one is a real division: a contiguous access needs none.

Masks and the emitter's choices (what is hoisted out of a loop over the row) still go by
the variables of the kernel's own index; only its text changes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

from torchstrata.core import same_size
from torchstrata.inductor.codegen.triton.printer import TritonPrinter, derive_lines
from torchstrata.inductor.ir.indexing import Index, Var, row_major_strides
from torchstrata.inductor.ir.recombine import div_mod_count, row_major_digits, substitute

_NAME = re.compile(r"\b[A-Za-z_]\w*\b")


class FlatIndices:
    """Picks each index's cheaper form: over the per-dim variables of ``groups`` (each
    ``(variables, flat name)``, the variables row-major over the flat index, as
    :func:`derive_lines` derives them) or over the flat indices themselves."""

    def __init__(self, groups: Iterable[tuple[Sequence[Var], str]]) -> None:
        self._values: dict[str, Index] = {}
        #: divisions and remainders of each variable's own derivation
        self._costs: dict[str, int] = {}
        for vars_, flat_name in groups:
            sizes = [var.size for var in vars_]
            digits = row_major_digits(Var(flat_name, math.prod(sizes)), sizes)
            strides = row_major_strides(sizes)
            for dim, (var, stride, digit) in enumerate(zip(vars_, strides, digits, strict=True)):
                self._values[var.name] = digit
                # what derive_lines prints: a symbolic stride divides at every size (0480)
                self._costs[var.name] = int(not same_size(stride, 1)) + int(dim > 0)
        self._mapping = dict(self._values)

    def choose(self, index: Index) -> Index:
        """``index`` over the flat indices where that takes fewer divisions and remainders
        than over the variables (with their derivations), else ``index`` itself."""
        names = index.variables()
        if not names & self._values.keys():
            return index
        per_dim = div_mod_count(index) + sum(self._costs.get(name, 0) for name in names)
        flat = substitute(
            index, {name: self._mapping[name] for name in names if name in self._mapping}
        )
        return flat if div_mod_count(flat) < per_dim else index


def without_unused(lines: Sequence[str], derived: Iterable[str]) -> list[str]:
    """``lines`` without those of ``derived`` (lines of :func:`derive_lines`, wherever they
    are in ``lines`` and however indented) whose variable no other line reads."""
    definitions = {line: line.split(" = ", 1)[0] for line in derived}
    read: set[str] = set()
    for line in lines:
        if line.strip() not in definitions:
            read.update(_NAME.findall(line))
    return [
        line
        for line in lines
        if line.strip() not in definitions or definitions[line.strip()] in read
    ]


def use_flat_indices(
    printer: TritonPrinter, row: Sequence[Var], red: Sequence[Var], enabled: bool = True
) -> list[str]:
    """Has ``printer`` print each index in its cheaper form (:class:`FlatIndices` over the
    row variables ``row`` derived from ``xindex`` and the reduced ones ``red`` from
    ``rindex``, as every kernel of this backend derives them), and returns the lines that
    derive them, for :func:`without_unused`; nothing where not ``enabled``
    (``InductorOptions.flat_indices``)."""
    if not enabled:
        return []
    printer.flat_index = FlatIndices([(row, "xindex"), (red, "rindex")]).choose
    return [*derive_lines(row, "xindex"), *derive_lines(red, "rindex")]
