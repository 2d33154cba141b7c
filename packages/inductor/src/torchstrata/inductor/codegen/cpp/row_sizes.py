"""The sizes a C++ row kernel's function takes after its buffers: its rows, its reduced
length, a cat's extents, or a column reduction's sizes; then, in a symbolic lowering
(decision 0381), each of the lowering's symbols (decision 0382)."""

from __future__ import annotations

import math

from torchstrata.core import SizeValue, active_symbols
from torchstrata.inductor.codegen.cat_bounds import cat_sizes
from torchstrata.inductor.codegen.cpp.columns import column_sizes, uses_column_loop
from torchstrata.inductor.ir.indexing import Var
from torchstrata.inductor.ir.kernel import Kernel, red_vars, row_vars


def reduced_length(kernel: Kernel) -> int | None:
    """The length of the one reduced dim of a row kernel, which its C++ function takes
    as ``red_len`` after ``rows``: its loops run to it and index coefficients equal to it
    (the row stride) are spelled as it (:mod:`~torchstrata.inductor.codegen.size_names`),
    so a softmax over a symbolic last dim is one source for every length. None for
    kernels that take none (pointwise, column reductions, several reduced dims)."""
    if len(kernel.red_shape) != 1 or uses_column_loop(kernel):
        return None
    return kernel.red_shape[0]


def symbol_params() -> tuple[str, ...]:
    """The names of the symbols of the symbolic lowering in progress, which every C++
    kernel function takes last (empty outside one): a size the kernel prints that no
    other argument names (a stride ``s27*r0``) is an expression over them, evaluated by
    the kernel from the values its launcher passes (decision 0382)."""
    return tuple(str(symbol) for symbol in active_symbols())


def outer_vars_of(kernel: Kernel) -> tuple[tuple[Var, ...], tuple[Var, ...]]:
    """The variables of ``kernel``'s outer (row, parallel) loop and of its inner loops."""
    if kernel.red_shape:
        return row_vars(kernel.row_shape), red_vars(kernel.red_shape)
    all_vars = row_vars(kernel.row_shape)
    # A 0-d kernel still gets a loop (of one) to keep a single code path.
    return all_vars[:-1], all_vars[-1:] or (Var("x0", 1),)


def outer_rows(kernel: Kernel) -> int | None:
    """The trip count of ``kernel``'s loop over rows, which its C++ function takes as its
    last argument ``int64_t rows``; None when it takes none. That is the outer loop (the
    outermost row dim's size is read nowhere else in the source: the row index is split
    into variables by the inner dims' sizes), or the one loop of a 1-D pointwise kernel
    (unless it is split into ranges, whose bounds stay literals). Column reductions take
    other sizes (:func:`size_arguments`); 0-d kernels keep their bounds in the source."""
    if uses_column_loop(kernel):
        return None
    outer_vars, _ = outer_vars_of(kernel)
    if outer_vars:
        return math.prod(v.size for v in outer_vars)
    return kernel.row_shape[0] if len(kernel.row_shape) == 1 else None


def size_arguments(kernel: Kernel) -> tuple[int | SizeValue, ...]:
    """The values of the ``int64_t`` size arguments that :func:`~torchstrata.inductor.codegen.cpp.generate.generate_cpp`'s function
    of ``kernel`` takes after its buffers: its rows (:func:`outer_rows`), or a column
    reduction's reduced length and chunking
    (:func:`~torchstrata.inductor.codegen.cpp.columns.column_sizes`); then the
    lowering's symbols (:func:`symbol_params`)."""
    symbols = active_symbols()
    if uses_column_loop(kernel):
        return (*(value for _, value in column_sizes(kernel)), *symbols)
    rows, length = outer_rows(kernel), reduced_length(kernel)
    return (
        *(() if rows is None else (rows,)),
        *(() if length is None else (length,)),
        *cat_sizes(kernel),
        *symbols,
    )
