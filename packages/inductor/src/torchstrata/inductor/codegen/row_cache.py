"""Row caches: values computed in one loop over a row and needed again by a later loop.

A reduction kernel that loops over its row several times (softmax: max, then sum, then
the normalised store) would recompute the prologue in every loop. For rows that fit a
small per-thread scratch array, each loop instead reads the values an earlier loop
already computed: walking a later loop's expressions from the top, the first value that
an earlier loop computed is read from scratch and its operands are not revisited.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torchstrata.inductor.ir.exprs import Expr, Op, children, walk

MAX_ROW_LENGTH = 8192  # elements per scratch array (per thread, on its stack)
MAX_SLOTS = 4


def plan_row_cache(
    loops: Sequence[Sequence[Expr]], depends_on_row: Callable[[Expr], bool], row_length: int
) -> dict[Expr, int]:
    """For each cached value, the index of the loop that computes (and stores) it.

    ``loops`` holds the root expressions of each loop over the row, in order.
    """
    if row_length > MAX_ROW_LENGTH or len(loops) < 2:
        return {}
    first_loop: dict[Expr, int] = {}
    for index, roots in enumerate(loops):
        for root in roots:
            for expr in walk(root):
                first_loop.setdefault(expr, index)
    cached: dict[Expr, int] = {}
    for index, roots in enumerate(loops):
        stack, seen = list(roots), set()
        while stack:
            expr = stack.pop()
            if expr in seen:
                continue
            seen.add(expr)
            if isinstance(expr, Op) and depends_on_row(expr) and first_loop[expr] < index:
                cached.setdefault(expr, first_loop[expr])
                continue
            stack.extend(children(expr))
    return dict(list(cached.items())[:MAX_SLOTS])
