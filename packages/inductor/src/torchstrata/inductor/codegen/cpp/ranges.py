"""Splitting an inner loop where conditions on its variable change value (C++ backend).

A cat lowers to a chain of ``where`` over the position along its dim, each piece read
at a wrapped index: ``where(x3 < 32, -q[(x3 % 32) + 32], q[x3 % 32])``. Over the whole
loop the loads go through a modulo and both branches are read, so the compiler emits
gathers and blends instead of contiguous vector loads.

Here the innermost loop is cut at every position where such a condition (a comparison
of two integer index expressions that depend on the loop variable alone, such as
``x3 < 32`` or ``x3 % 32 >= 16``) changes value. Each range ``[start, stop)`` gets its
own loop over a fresh variable ``u`` in ``[0, stop - start)``, and every index is
rewritten with ``x3 = u + start``: the index algebra then simplifies the modulo away
(``(u + 32) % 32`` is ``u``), the conditions become the constants they are over the
range and each ``where`` keeps its one live branch. Every range is a plain contiguous
loop, and a kernel without such conditions is generated exactly as before. Where the
conditions change value, and how indices are rewritten, is the backend-neutral analysis
of :mod:`~torchstrata.inductor.ir.ranges`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import attrs
import torch

from torchstrata.inductor.ir.exprs import Constant, Expr, Op, map_indices, walk
from torchstrata.inductor.ir.indexing import Index, Var
from torchstrata.inductor.ir.kernel import Store
from torchstrata.inductor.ir.ranges import (
    COMPARISONS,
    condition_runs,
    decide_comparison,
    substitute,
)

#: Most loops one loop is split into (the body is generated once per range).
MAX_RANGES = 16


class LoopRange:
    """One range ``[start, stop)`` of a loop over ``original``, looped over :attr:`var`.

    :attr:`var` runs from 0 and ``original`` is ``var + start``; :meth:`expr`,
    :meth:`index` and :meth:`store` rewrite what the loop body computes in terms of it.
    ``decided`` holds the conditions whose value over the range the split found; they
    become constants, as do those that the bounds of their rewritten operands decide.
    The one range of an unsplit loop is ``original`` itself and rewrites nothing.
    """

    def __init__(
        self,
        original: Var,
        start: int,
        stop: int,
        name: str,
        decided: Mapping[Expr, bool] | None = None,
    ) -> None:
        self.original = original
        self.start = start
        self.stop = stop
        self.var = Var(name, stop - start)
        self._identity = name == original.name and start == 0 and stop == original.size
        self._value = Index.of(self.var) + start
        self._exprs: dict[Expr, Expr] = {
            condition: Constant(value, torch.bool) for condition, value in (decided or {}).items()
        }
        self._indices: dict[Index, Index] = {}

    def index(self, index: Index) -> Index:
        """``index`` with the loop variable replaced by ``var + start``, simplified."""
        if self._identity:
            return index
        found = self._indices.get(index)
        if found is None:
            found = self._indices[index] = substitute(index, self.original.name, self._value)
        return found

    def expr(self, expr: Expr) -> Expr:
        """``expr`` over this range: indices rewritten, decided conditions folded."""
        if self._identity:
            return expr
        return map_indices(expr, self.index, self._exprs, fold)

    def store(self, store: Store) -> Store:
        """``store`` over this range."""
        if self._identity:
            return store
        return attrs.evolve(store, index=self.index(store.index), value=self.expr(store.value))


def whole_loop(var: Var) -> LoopRange:
    """The one range of a loop over ``var`` that is not split."""
    return LoopRange(var, 0, var.size, var.name)


def split_loop(exprs: Sequence[Expr], var: Var) -> list[LoopRange]:
    """The ranges of a loop over ``var`` whose body computes ``exprs``.

    Cut where a condition of the body changes value (see the module docstring); one
    range (no split) when there is no such condition, or when splitting would take more
    than :data:`MAX_RANGES` loops.
    """
    runs: dict[Expr, list[tuple[int, bool]]] = {}
    for expr in exprs:
        for node in walk(expr):
            found = condition_runs(node, var) if isinstance(node, Op) else None
            if found is not None and len(found) > 1:
                runs[node] = found
    cuts = sorted({start for found in runs.values() for start, _ in found[1:]})
    if not cuts or len(cuts) >= MAX_RANGES:
        return [whole_loop(var)]
    bounds = [0, *cuts, var.size]
    return [
        LoopRange(var, start, stop, f"{var.name}_{k}", _values_at(runs, start))
        for k, (start, stop) in enumerate(itertools.pairwise(bounds))
    ]


def _values_at(runs: Mapping[Expr, list[tuple[int, bool]]], position: int) -> dict[Expr, bool]:
    """The value of each condition at ``position`` (of its last run starting at or before)."""
    return {
        condition: next(value for start, value in reversed(found) if start <= position)
        for condition, found in runs.items()
    }


def _bool(expr: Expr) -> bool | None:
    return bool(expr.value) if isinstance(expr, Constant) and expr.dtype is torch.bool else None


def fold(op: Op) -> Expr:
    """``op`` simplified when its conditions are decided (operands already folded).

    Comparisons decided by bounds become constants; ``&``, ``|``, ``^`` and ``~`` of
    decided booleans fold; a ``where`` on a constant condition is its live branch.
    """
    if op.name in COMPARISONS:
        value = decide_comparison(op)
        return op if value is None else Constant(value, torch.bool)
    if op.name == "where":
        condition = _bool(op.args[0])
        if condition is None:
            return op
        branch = op.args[1] if condition else op.args[2]
        if branch.dtype != op.dtype:
            return Op("convert_element_type", (branch,), op.dtype)
        return branch
    if op.dtype is not torch.bool:
        return op
    values = [_bool(arg) for arg in op.args]
    if op.name == "bitwise_not" and values[0] is not None:
        return Constant(not values[0], torch.bool)
    if op.name in ("bitwise_and", "bitwise_or"):
        absorbing = op.name == "bitwise_or"  # True absorbs an "or", False an "and"
        if absorbing in values:
            return Constant(absorbing, torch.bool)
        if values[0] is not None:
            return op.args[1]
        if values[1] is not None:
            return op.args[0]
    if op.name == "bitwise_xor" and None not in values:
        return Constant(values[0] != values[1], torch.bool)
    return op
