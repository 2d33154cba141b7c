"""A kernel's leading row dims walked as one: ``[B, T]`` rows as ``B*T`` rows.

A kernel over rows ``(B, T)`` splits its row counter into ``x0 = xi / T`` and ``x1 = xi %
T``, so ``T`` is in its source even where every access is ``128*T*x0 + 128*x1 + r0``
(``128*xi + r0``): a graph lowered for several sequence lengths then built one kernel
per length. Where the rows are contiguous in every index, the leading dims are one
variable of ``B*T`` rows (the outer loop, whose trip count the kernel takes as an
argument), and the source no longer names ``T``.

Each leading variable ``x_d`` is replaced by ``(x0 // stride_d) % size_d`` of the new
variable (its row-major position), indices are simplified and ``c*d*(b // d) + c*(b % d)``
folded back into ``c*b`` (:func:`~torchstrata.inductor.ir.indexing.fold_div_mod`). The
rewrite is kept only when no index, value or store is left with a division or remainder
of the new variable: the rows really are contiguous. The iteration order is unchanged
(the row-major order of the dims), so results are the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs

from torchstrata.inductor.ir.exprs import Expr, IndexValue, IndirectLoad, Load, map_indices, walk
from torchstrata.inductor.ir.indexing import FloorDiv, Index, Mod, Var, fold_div_mod
from torchstrata.inductor.ir.kernel import Kernel, Store, red_vars, row_vars


def flatten_rows(kernel: Kernel, inner_loop: bool = True) -> Kernel:
    """``kernel`` with its leading row dims as one (see the module docstring): all row
    dims of a reduction, all but the last (the inner loop) of a pointwise kernel, or all
    of them where ``inner_loop`` is False (Triton walks a pointwise kernel's elements as
    one flat range); with its indices only folded when there is one such dim or the rows
    are not contiguous in every index."""
    if kernel.parts or kernel.tail is not None or kernel.partials is not None:
        return kernel
    whole = kernel.red_shape or not inner_loop
    lead = len(kernel.row_shape) if whole else len(kernel.row_shape) - 1
    lead = lead if lead >= 2 else 0  # else indices are only folded
    old = row_vars(kernel.row_shape)
    rows = math.prod(kernel.row_shape[:lead])
    flat = Var("x0", rows)
    mapping = _positions(old[:lead], flat)
    if lead:
        for position, var in enumerate(old[lead:], start=1):
            mapping[var.name] = Index.of(Var(f"x{position}", var.size))
    flattened = attrs.evolve(
        _rewritten(kernel, mapping),
        row_shape=(rows, *kernel.row_shape[lead:]) if lead else kernel.row_shape,
    )
    return flattened if not (lead and _divides(flattened, flat.name)) else kernel


def flatten_reduced(kernel: Kernel) -> Kernel:
    """``kernel`` with its reduced dims as one variable ``r0`` of ``row_length`` elements
    where every index walks them contiguously (a column sum over rows ``(B, T)`` as one
    reduced dim of ``B*T``, so ``T`` is not in the source), with its indices only folded
    otherwise or when there is one reduced dim. Only the reduced variables are renamed:
    row variables and the iteration order (row-major over the reduced dims) are kept."""
    if kernel.parts or kernel.tail is not None or kernel.partials is not None:
        return kernel
    old = red_vars(kernel.red_shape)
    flat = Var("r0", kernel.row_length)
    if len(old) < 2:
        return _rewritten(kernel, {})
    flattened = attrs.evolve(_rewritten(kernel, _positions(old, flat)), red_shape=(flat.size,))
    return kernel if _divides(flattened, flat.name) else flattened


def _positions(old: tuple[Var, ...], flat: Var) -> dict[str, Index]:
    """Each of ``old`` (row-major dims, ``flat`` their product) as ``(flat // stride) %
    size``, each stride the product of the later sizes (not ``flat``'s size divided:
    sympy leaves ``floor((64*s - 64)/(s - 1))`` unevaluated, a symbolic size not printed)."""
    mapping: dict[str, Index] = {}
    sizes = [max(var.size, 1) for var in old]
    for position, var in enumerate(old):
        stride = math.prod(sizes[position + 1 :])
        mapping[var.name] = Index.of(flat).floordiv(max(stride, 1)).mod(sizes[position])
    return mapping


def _rewritten(kernel: Kernel, mapping: Mapping[str, Index]) -> Kernel:
    """``kernel`` with ``mapping`` substituted into every index, div/mod pairs folded."""

    def rewrite(index: Index) -> Index:
        return fold_div_mod(_substitute(index, mapping))

    done: dict[Expr, Expr] = {}

    def stores(items: tuple[Store, ...]) -> tuple[Store, ...]:
        return tuple(
            attrs.evolve(s, index=rewrite(s.index), value=map_indices(s.value, rewrite, done))
            for s in items
        )

    return attrs.evolve(
        kernel,
        reductions=tuple(
            attrs.evolve(spec, body=map_indices(spec.body, rewrite, done))
            for spec in kernel.reductions
        ),
        row_stores=stores(kernel.row_stores),
        full_stores=stores(kernel.full_stores),
    )


def _substitute(index: Index, mapping: Mapping[str, Index]) -> Index:
    """``index`` with each variable named in ``mapping`` replaced by its value, all at
    once (a value may name a replaced variable), simplified again."""
    result = Index.constant(index.const)
    for atom, coeff in index.terms:
        if isinstance(atom, Var):
            part = mapping.get(atom.name, Index.of(atom))
        elif isinstance(atom, FloorDiv):
            part = _substitute(atom.base, mapping).floordiv(atom.divisor)
        else:
            part = _substitute(atom.base, mapping).mod(atom.modulus)
        result = result + part * coeff
    return result


def _divides(kernel: Kernel, name: str) -> bool:
    """Does any index of ``kernel`` divide (or take a remainder of) the variable ``name``?"""
    indices = [s.index for s in kernel.row_stores + kernel.full_stores]
    roots = [s.value for s in kernel.row_stores + kernel.full_stores]
    roots += [spec.body for spec in kernel.reductions]
    for root in roots:
        indices += [e.index for e in walk(root) if isinstance(e, Load | IndirectLoad | IndexValue)]
    return any(_divided(index, name) for index in indices)


def _divided(index: Index, name: str) -> bool:
    return any(
        isinstance(atom, FloorDiv | Mod) and name in atom.base.variables()
        for atom, _ in index.terms
    )
