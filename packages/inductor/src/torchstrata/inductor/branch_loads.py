"""Loads whose value only matters on one side of a ``where``: the condition can mask them.

A concatenation lowers to ``where(i < 64, -q[i % 64 + 64], q[i % 64])``: every element
loads both pieces and keeps one. When a load feeds nothing but one branch of a ``where``
(through any chain of elementwise ops used nowhere else), the ``where``'s condition (or its
negation) is a valid extra mask for it: the lanes it masks off never see the value. A
backend with predicated loads (Triton) then issues half of the cat's loads instead of all
of them; the result is unchanged because the masked lanes take the other branch.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from torchstrata.inductor.exprs import Expr, Load, Op, children, walk


@attrs.frozen
class BranchGuard:
    """Load only on lanes where ``condition`` is ``taken`` (True: the where's true branch)."""

    condition: Expr
    taken: bool


def branch_guards(roots: Iterable[Expr]) -> dict[Load, BranchGuard]:
    """The loads under ``roots`` that one ``where`` branch alone consumes, with its guard.

    Conservative: a load (or any op on its way up) used by two distinct parents, used
    directly by a root, or reaching the ``where`` as its condition is not guarded.
    """
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
        assert isinstance(user, Op)
        if user.name == "where" and node is not user.args[0]:
            true_side, false_side = node == user.args[1], node == user.args[2]
            if true_side != false_side:
                return BranchGuard(user.args[0], true_side)
        node = user
    return None
