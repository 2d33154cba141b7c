"""The description of one fused kernel that every backend generates code from.

A kernel iterates over a domain ``row_shape + red_shape``. A pointwise kernel has no
reduced dims: every store happens once per row. A reduction kernel computes, per row,
its reductions in order (a reduction may read earlier ones: softmax's sum reads its max),
then the row stores (values of ``row_shape``) and the full stores (values of the whole
domain, which may read the row's reductions: softmax's division).
"""

from __future__ import annotations

import math

import attrs
import torch

from torchstrata.inductor.ir.exprs import Expr
from torchstrata.inductor.ir.indexing import Index, Var


@attrs.frozen
class ReductionSpec:
    """One reduction of a kernel: ``name`` = ``kind`` over the reduced dims of ``body``."""

    name: str
    kind: str
    body: Expr
    dtype: torch.dtype


@attrs.frozen
class Store:
    """Write ``value`` to element ``index`` of ``buffer``."""

    buffer: str
    index: Index
    value: Expr
    dtype: torch.dtype


@attrs.frozen
class BufferArg:
    """A kernel argument: a pointer to the first element of a buffer of ``dtype``."""

    name: str
    dtype: torch.dtype


@attrs.frozen
class Tail:
    """A full reduction over a kernel's rows, fused into it (see ``tails.py``): each
    program sums ``reductions`` over its own rows, and the last program to finish combines
    the partial sums and writes ``stores`` (whose values read only the combined sums)."""

    reductions: tuple[ReductionSpec, ...]
    stores: tuple[Store, ...]


@attrs.frozen
class Partials:
    """Column sums over a kernel's rows, fused into it (see ``partials.py``): program ``p``
    computes rows ``[p * chunk, (p + 1) * chunk)`` and sums ``reductions`` (bodies over the
    kernel's own variables) over them, then writes ``stores`` (indices over ``xp``, the
    program, and the kernel's reduced variables; values read only those sums)."""

    chunk: int
    programs: int
    reductions: tuple[ReductionSpec, ...]
    stores: tuple[Store, ...]


@attrs.frozen
class Kernel:
    """A fused kernel (see the module docstring)."""

    name: str
    row_shape: tuple[int, ...]
    red_shape: tuple[int, ...]
    reductions: tuple[ReductionSpec, ...]
    row_stores: tuple[Store, ...]
    full_stores: tuple[Store, ...]
    args: tuple[BufferArg, ...]
    ops: tuple[str, ...] = ()
    #: A horizontal kernel: independent pointwise kernels run by one launch over the
    #: concatenation of their elements (its stores and args are theirs together).
    parts: tuple[Kernel, ...] = ()
    #: A full reduction of this kernel's rows finished by its last program (Triton only).
    tail: Tail | None = None
    #: Column sums over chunks of this kernel's rows, one chunk per program (Triton only).
    partials: Partials | None = None

    @property
    def rows(self) -> int:
        """Number of rows (product of ``row_shape``)."""
        return math.prod(self.row_shape)

    @property
    def row_length(self) -> int:
        """Number of reduced elements per row (1 for a pointwise kernel)."""
        return math.prod(self.red_shape)

    @property
    def is_reduction(self) -> bool:
        """True when the kernel reduces."""
        return bool(self.red_shape) or bool(self.reductions)


def row_vars(row_shape: tuple[int, ...]) -> tuple[Var, ...]:
    """Row loop variables for ``row_shape``."""
    return tuple(Var(f"x{d}", size) for d, size in enumerate(row_shape))


def red_vars(red_shape: tuple[int, ...]) -> tuple[Var, ...]:
    """Reduction loop variables for ``red_shape``."""
    return tuple(Var(f"r{d}", size) for d, size in enumerate(red_shape))


REDUCTION_IDENTITY = {"sum": 0, "prod": 1, "amax": float("-inf"), "amin": float("inf")}


def reduction_identity(kind: str, dtype: torch.dtype) -> int | float | bool:
    """The neutral element of ``kind`` in ``dtype`` (integer extremes for integer max/min)."""
    value = REDUCTION_IDENTITY[kind]
    if dtype.is_floating_point or kind in ("sum", "prod"):
        return value
    info = torch.iinfo(dtype)
    return info.min if kind == "amax" else info.max
