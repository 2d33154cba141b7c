"""Column reductions: kernels that reduce over strided dims into contiguous outputs.

A weight gradient ``dW[n] = sum_m dy[m, n] * xhat[m, n]`` is a kernel whose rows are the
N columns and whose reduced dim is the M rows, at stride N. Walking each row of such a
kernel (down one column) touches one element per cache line, so both backends cut the
work differently when they see one: Triton launches tiles wide in rows and short in the
row (:mod:`~torchstrata.inductor.codegen.triton.tuning`), C++ makes the reduced dim the outer loop
around a SIMD loop over contiguous columns (:mod:`~torchstrata.inductor.codegen.cpp.columns`).
Both decide with :func:`is_column_reduction`; each states its own rule (see there).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from torchstrata.inductor.ir.exprs import Expr, Load, walk
from torchstrata.inductor.ir.indexing import Index, Var
from torchstrata.inductor.ir.kernel import Kernel, red_vars, row_vars


def _unit_stride(index: Index, names: Collection[str]) -> bool:
    """True when ``index`` steps by one element along one of the loop variables ``names``."""
    return any(
        isinstance(atom, Var) and atom.name in names and coeff == 1 for atom, coeff in index.terms
    )


def _loads(kernel: Kernel) -> list[Load]:
    roots = [spec.body for spec in kernel.reductions] + [s.value for s in kernel.full_stores]
    return _loads_of(roots)


def _loads_of(roots: Sequence[Expr]) -> list[Load]:
    return [expr for root in roots for expr in walk(root) if isinstance(expr, Load)]


def walks_columns(
    roots: Sequence[Expr], row_shape: tuple[int, ...], red_shape: tuple[int, ...]
) -> bool:
    """The default vote of :func:`is_column_reduction` over the loads of ``roots`` (the
    expressions of a kernel over ``row_shape + red_shape`` being formed): True when the
    bulk of them is contiguous along the column."""
    reduced = red_vars(red_shape)
    columns = [v.name for v in row_vars(row_shape) if v.size > 1][-1:]
    if not reduced or not columns:
        return False
    return _vote(_loads_of(roots), columns[0], [v.name for v in reduced])


def _vote(loads: Sequence[Load], column: str, reduced: Sequence[str]) -> bool:
    bulk = [
        load
        for load in loads
        if column in load.index.variables() and load.index.variables() & set(reduced)
    ]
    along_columns = sum(_unit_stride(load.index, [column]) for load in bulk)
    along_rows = sum(
        _unit_stride(load.index, [reduced[-1]]) and not _unit_stride(load.index, [column])
        for load in bulk
    )
    return along_columns > along_rows


def is_column_reduction(kernel: Kernel, *, unanimous: bool = False) -> bool:
    """True when ``kernel`` reduces over strided dims into contiguous columns.

    The *column* is the innermost row dim of size > 1. Only the bulk of the data counts:
    the loads that vary along both the column and the reduced dims. Loads constant along
    the column (a per-row statistic broadcast across the columns, a row's target index)
    do not.

    Two rules, one per backend:

    * By default (C++, :func:`~torchstrata.inductor.codegen.cpp.columns.uses_column_loop`), a
      vote: the bulk loads contiguous along the column must outnumber those contiguous
      along the last reduced dim instead (the dim a row loop walks innermost); a load
      contiguous along neither counts for neither. The column loop pays off as long as
      most of the data streams in order.
    * ``unanimous`` (Triton, :func:`~torchstrata.inductor.codegen.triton.tuning.candidate_configs`):
      no bulk load may be contiguous along any reduced dim, and at least one must be
      contiguous along the column. One tile shape serves every load of the kernel, so
      tiles short in the row are only chosen when no load needs them long.

    A unanimous column reduction is one by the vote too (no load then votes against).
    """
    reduced = red_vars(kernel.red_shape)
    columns = [v.name for v in row_vars(kernel.row_shape) if v.size > 1][-1:]
    if not reduced or not columns:
        return False
    reduced_names = {v.name for v in reduced}
    if not unanimous:
        return _vote(_loads(kernel), columns[0], [v.name for v in reduced])
    bulk = [
        load
        for load in _loads(kernel)
        if columns[0] in load.index.variables() and load.index.variables() & reduced_names
    ]
    along_columns = sum(_unit_stride(load.index, columns) for load in bulk)
    return along_columns > 0 and not any(_unit_stride(load.index, reduced_names) for load in bulk)
