"""Joining a kernel into another one nearby in the plan, past steps it does not touch.

Tails and column partial sums join a *host* kernel that reads the same rows. The
scheduler orders kernels by their first node, so the host is not always the kernel just
before: RMSNorm's backward plans ``dw``'s partial sums, then the sum of the partials, then
``dx`` (the row kernel that reads ``x`` and ``dy`` too). :func:`fuse_nearby` looks a few
steps either way and moves a kernel past steps it shares no buffer with:

* a host before ``after``: ``after`` moves back to it, past the steps between;
* a host after ``after`` (``hosts_after=True``): the host moves back to ``after``, past
  the steps between (``dw``'s partials join ``dx``, the sum of the partials follows).

Two steps are independent when neither stores a buffer the other names (loads or stores);
an extern ATen step is never moved past.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.scheduler import ExternStep

Step = Kernel | ExternStep
Fuse = Callable[[Kernel, Kernel], Kernel | None]
#: How many steps either way a host is looked for.
REACH = 4


def stored_buffers(kernel: Kernel) -> frozenset[str]:
    """Every buffer ``kernel`` writes: its stores, its parts', its tail's and partials'."""
    stores = kernel.row_stores + kernel.full_stores
    for part in kernel.parts:
        stores += part.row_stores + part.full_stores
    if kernel.tail is not None:
        stores += kernel.tail.stores
    if kernel.partials is not None:
        stores += kernel.partials.stores
    return frozenset(store.buffer for store in stores)


def independent(a: Kernel, b: Kernel) -> bool:
    """True when neither kernel stores a buffer the other names."""
    stored_a, stored_b = stored_buffers(a), stored_buffers(b)
    names_a = {arg.name for arg in a.args} | stored_a
    names_b = {arg.name for arg in b.args} | stored_b
    return not (stored_a & names_b or stored_b & names_a)


def _movable(mover: Kernel, past: Sequence[Step]) -> bool:
    return all(isinstance(step, Kernel) and independent(mover, step) for step in past)


def _join(steps: list[Step], i: int, fuse: Fuse, hosts_after: bool) -> bool:
    """Join ``steps[i]`` with a host nearby (in place); True when it did. Of the two, the
    later one moves back to the earlier one's place, past the steps between them."""
    after = steps[i]
    assert isinstance(after, Kernel)
    searches = [range(i - 1, max(-1, i - 1 - REACH), -1)]
    if hosts_after:
        searches.append(range(i + 1, min(len(steps), i + 1 + REACH)))
    for search in searches:
        for j in search:
            host = steps[j]
            if not isinstance(host, Kernel):
                break
            first, last = min(i, j), max(i, j)
            mover = steps[last]
            assert isinstance(mover, Kernel)
            if not _movable(mover, steps[first + 1 : last]):
                continue  # cheap; fuse rebuilds bodies
            fused = fuse(host, after)
            if fused is not None:
                steps[first] = fused
                del steps[last]
                return True
    return False


def fuse_nearby(steps: Sequence[Step], fuse: Fuse, *, hosts_after: bool = False) -> list[Step]:
    """``steps`` with each kernel that ``fuse(host, kernel)`` joins to a host nearby
    replaced, with the host, by their fused kernel (which may take another one too)."""
    out = list(steps)
    i = 0
    while i < len(out):
        if not (isinstance(out[i], Kernel) and _join(out, i, fuse, hosts_after)):
            i += 1
    return out
