"""One-hot picks of C++ row kernels: a sum over the reduced var ``r`` of
``where(r == e, v, 0)``, with ``e`` constant along the row, is ``v`` at ``r = e`` (0 where
``e`` is outside the row). Cross-entropy's picked logit takes this form when it is read
in the kernel of the row's statistics. Read once per row, it spares that kernel's first
loop a 64-bit compare, a select and a blocked sum at every element (decision 0335).

The value is the sum's: ``0 + v`` (so ``-0.0`` gives ``+0.0``), NaN and inf at the target
kept, any value elsewhere ignored, as ``where`` then ``sum`` give.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import attrs

from torchstrata.inductor.codegen.cpp.exprs import compute_type, emit_store, literal
from torchstrata.inductor.codegen.emitter import ExprEmitter
from torchstrata.inductor.codegen.size_names import number
from torchstrata.inductor.ir.exprs import (
    Constant,
    Expr,
    IndexValue,
    Op,
    map_ops,
    reductions_used,
    variables,
    walk,
)
from torchstrata.inductor.ir.indexing import Var
from torchstrata.inductor.ir.kernel import ReductionSpec, Store


def _is_var(expr: Expr, var: Var) -> bool:
    if not isinstance(expr, IndexValue) or expr.dtype.is_floating_point:
        return False
    index = expr.index
    if index.const != 0 or len(index.terms) != 1:
        return False
    (atom, coeff), *_ = index.terms
    return coeff == 1 and isinstance(atom, Var) and atom.name == var.name


def _is_plus_zero(expr: Expr) -> bool:
    if not isinstance(expr, Constant) or isinstance(expr.value, bool) or expr.value != 0:
        return False
    return math.copysign(1.0, float(expr.value)) > 0


def one_hot_pick(spec: ReductionSpec, var: Var, phase: Sequence[str]) -> tuple[Expr, Expr] | None:
    """``(e, v)`` when ``spec`` sums ``where(var == e, v, 0)`` over ``var`` alone, ``e`` an
    integer constant along ``var``; neither reads a reduction of ``phase`` (the names of
    the reductions computed in the same loop)."""
    body = spec.body
    if spec.kind != "sum" or not isinstance(body, Op) or body.name != "where":
        return None
    cond, value, other = body.args
    if not _is_plus_zero(other) or not isinstance(cond, Op) or cond.name != "eq":
        return None
    if reductions_used(body) & set(phase):
        return None
    left, right = cond.args
    for at, index in ((left, right), (right, left)):
        integer = not index.dtype.is_floating_point
        if _is_var(at, var) and integer and var.name not in variables(index):
            return index, value
    return None


def pick_lines(
    emitter: ExprEmitter, spec: ReductionSpec, index: Expr, value: Expr, var: Var
) -> list[str]:
    """Lines defining ``red_<name>`` for the pick ``(index, value)`` of ``spec``: ``value``
    emitted once, with ``var`` bound to ``index`` where it lies in the row."""
    ctype = compute_type(spec.dtype)
    zero = literal(0, spec.dtype)
    emitter.open_inner()
    at = emitter.emit(index)
    picked = emitter.emit(value)
    inner = emitter.close_inner()
    name = f"red_{spec.name}"
    bound = f"static_cast<uint64_t>({at}) < static_cast<uint64_t>({number(var.size)})"
    return [
        *emitter.take_outer(),
        f"{ctype} pick_{spec.name} = {zero};",
        f"if ({bound}) {{",
        f"  const int64_t {var.name} = static_cast<int64_t>({at});",
        *("  " + line for line in inner),
        f"  pick_{spec.name} = static_cast<{ctype}>({zero} + {picked});",
        "}",
        f"const {ctype} {name} = pick_{spec.name};",
    ]


def one_hot_where(expr: Expr, var: Var) -> Op | None:
    """A ``where(var == e, a, b)`` inside ``expr``, ``e`` an integer constant along
    ``var`` (cross-entropy's gradient: ``-g / n`` at the target), or None."""
    for node in walk(expr):
        if not isinstance(node, Op) or node.name != "where":
            continue
        cond = node.args[0]
        if not isinstance(cond, Op) or cond.name != "eq":
            continue
        left, right = cond.args
        for at, index in ((left, right), (right, left)):
            integer = not index.dtype.is_floating_point
            if _is_var(at, var) and integer and var.name not in variables(index):
                return node
    return None


def with_branch(expr: Expr, where: Op, taken: bool) -> Expr:
    """``expr`` with ``where`` replaced by its value where its condition is ``taken``."""
    branch = where.args[1] if taken else where.args[2]
    return map_ops(expr, lambda op: branch if op == where else op, {})


def one_hot_stores(
    emitter: ExprEmitter,
    stores: Sequence[Store],
    var: Var,
    enter: Callable[[], None],
) -> tuple[list[Store], list[str]]:
    """Stores of a loop over ``var`` whose values hold a one-hot ``where``
    (:func:`one_hot_where`): the loop's stores take its other branch at every element, and
    the lines after the loop store the element at ``var = e`` again, with the branch taken
    (where ``e`` lies in the row). Spares the loop a 64-bit compare and a select at every
    element (decision 0335). Stores whose index does not move with ``var`` are kept."""
    looped: list[Store] = []
    fixes: list[tuple[Expr, Store]] = []
    for store in stores:
        where = one_hot_where(store.value, var)
        if where is None or var not in {atom for atom, _ in store.index.terms}:
            looped.append(store)
            continue
        cond = where.args[0]
        assert isinstance(cond, Op)
        left, right = cond.args
        index = right if _is_var(left, var) else left
        looped.append(attrs.evolve(store, value=with_branch(store.value, where, False)))
        fixes.append((index, attrs.evolve(store, value=with_branch(store.value, where, True))))
    lines: list[str] = []
    for index, store in fixes:
        emitter.open_inner()
        enter()
        at = emitter.emit(index)
        line = emit_store(store, emitter.emit)
        inner = emitter.close_inner()
        bound = f"static_cast<uint64_t>({at}) < static_cast<uint64_t>({number(var.size)})"
        lines += [
            f"if ({bound}) {{",
            f"  const int64_t {var.name} = static_cast<int64_t>({at});",
            *("  " + text for text in [*inner, line]),
            "}",
        ]
    return looped, lines
