"""Loads whose value only matters on one side of a ``where``: the condition can mask them.

A concatenation lowers to ``where(i < 64, -q[i % 64 + 64], q[i % 64])``: every element
loads both pieces and keeps one. When a load feeds nothing but one branch of a ``where``
(through any chain of elementwise ops used nowhere else), the ``where``'s condition (or its
negation) is a valid extra mask for it: the lanes it masks off never see the value. A
backend with predicated loads (Triton) then issues half of the cat's loads instead of all
of them; the result is unchanged because the masked lanes take the other branch.

On the lanes the guard keeps, the wrap that keeps the index in bounds everywhere is
not needed: :func:`guarded_index` gives ``q[i + 64]`` for ``q[i % 64 + 64]`` under
``i < 64``. The plain affine index lets Triton prove the load contiguous and vectorise
it (the wrapped one cost RoPE 15% on the H200).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from torchstrata.core import compared_by_expression
from torchstrata.inductor.ir.exprs import Expr, Load, Op, children, walk
from torchstrata.inductor.ir.indexing import FloorDiv, Index, Mod, Var
from torchstrata.inductor.ir.ranges import condition_runs, substitute


@attrs.frozen
class BranchGuard:
    """Load only on lanes where ``condition`` is ``taken`` (True: the where's true branch)."""

    condition: Expr
    taken: bool


def branch_guards(roots: Iterable[Expr]) -> dict[Load, BranchGuard]:
    """The loads under ``roots`` that one ``where`` branch alone consumes, with its guard.

    Conservative: a load (or any op on its way up) used by two distinct parents, used
    directly by a root, used as the position of an indirect load, or reaching the
    ``where`` as its condition is not guarded. Expressions are matched as trees, their
    symbolic sizes by expression: two loads equal at one size only (a roll's two sides
    at 2 rows) are two loads, each guarded, right at every size (decision 0480).
    """
    with compared_by_expression():
        return _branch_guards(roots)


def _branch_guards(roots: Iterable[Expr]) -> dict[Load, BranchGuard]:
    roots = list(roots)
    parents: dict[Expr, set[Expr]] = {}
    nodes: list[Expr] = []
    seen: set[Expr] = set()
    for root in roots:
        for node in walk(root):
            if node in seen:
                continue
            seen.add(node)
            nodes.append(node)
            for child in children(node):
                parents.setdefault(child, set()).add(node)
    root_set = set(roots)
    guards: dict[Load, BranchGuard] = {}
    for node in nodes:
        if isinstance(node, Load):
            guard = _guard_of(node, parents, root_set)
            if guard is not None:
                guards[node] = guard
    return guards


def _guard_of(load: Load, parents: dict[Expr, set[Expr]], roots: set[Expr]) -> BranchGuard | None:
    node: Expr = load
    while node not in roots:
        users = parents.get(node, set())
        if len(users) != 1:
            return None
        (user,) = users
        if not isinstance(user, Op):
            return None  # the position of an indirect load: needed on every lane it loads
        if user.name == "where" and node is not user.args[0]:
            true_side, false_side = node == user.args[1], node == user.args[2]
            if true_side != false_side:
                return BranchGuard(user.args[0], true_side)
        node = user
    return None


def guarded_index(load: Load, guard: BranchGuard) -> Index:
    """``load``'s index on the lanes ``guard`` keeps, unwrapped where that makes it affine.

    When the guard is a comparison on one loop variable ``v`` that holds on one run
    ``[start, stop)`` of ``v``, the index is rewritten with ``v = u + start`` for a fresh
    ``u`` in ``[0, stop - start)``: the index algebra drops every modulo and division that
    is constant or linear over the run. If ``u`` is left in no modulo or division, the
    result (``u`` put back as ``v - start``) equals the index on the whole run; otherwise,
    or for any other guard, the index is returned unchanged. Only for masked loads: off the
    run the rewritten index may point outside the buffer.
    """
    condition = guard.condition
    if not isinstance(condition, Op):
        return load.index
    for var in _variables(load.index):
        runs = condition_runs(condition, var)
        if runs is None:
            continue
        stops = [start for start, _ in runs[1:]] + [var.size]
        kept = [(start, stop) for (start, value), stop in zip(runs, stops) if value == guard.taken]
        if len(kept) != 1:
            return load.index
        start, stop = kept[0]
        run = Var(f"{var.name}_run", stop - start)
        inner = substitute(load.index, var.name, Index.of(run) + start)
        if run.name in _wrapped_variables(inner):
            return load.index
        return substitute(inner, run.name, Index.of(var) + (-start))
    return load.index


def _variables(index: Index) -> list[Var]:
    """The loop variables of ``index``, in the order first met."""
    found: dict[str, Var] = {}
    for atom, _ in index.terms:
        if isinstance(atom, Var):
            found.setdefault(atom.name, atom)
        else:
            for var in _variables(atom.base):
                found.setdefault(var.name, var)
    return list(found.values())


def _wrapped_variables(index: Index) -> set[str]:
    """Names of the variables that ``index`` reads inside a modulo or a division."""
    return {
        name
        for atom, _ in index.terms
        if isinstance(atom, (FloorDiv, Mod))
        for name in atom.base.variables()
    }
