"""A fused kernel's bodies rebuilt over its host kernel's loop variables.

Tails (``tails.py``) and column partial sums (``partials.py``) move a kernel ``after``'s
reduction bodies into a ``host`` kernel that reads the same rows. :class:`HostBody`
rewrites a body: its indices through a variable map, and each load of a buffer ``host``
stores becomes the stored value itself when it reads the element just stored, unrounded
(the host's program holds it; other programs' stores are not visible to it). Any other
read of what ``host`` writes, and anything the subclass does not allow, raises
:class:`NotFusable`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from torchstrata.inductor.ir.exprs import Constant, Expr, IndexValue, IndirectLoad, Load, Op
from torchstrata.inductor.ir.indexing import Index
from torchstrata.inductor.ir.kernel import Kernel, Store


class NotFusable(Exception):
    """A body that cannot be rebuilt over the host."""


class HostBody:
    """``after``'s bodies over ``host``'s variables: ``index`` maps an index of ``after``
    to ``host``'s, ``stored`` are the stores of ``host`` whose values replace loads."""

    #: Whether gathers (indirect loads) may move into the host.
    gathers = False

    def __init__(
        self, index: Callable[[Index], Index], host: Kernel, stored: Iterable[Store]
    ) -> None:
        self.index = index
        self.stored = {store.buffer: store for store in stored}
        self.written = {store.buffer for store in (*host.row_stores, *host.full_stores)}
        self.done: dict[Expr, Expr] = {}

    def fits(self, store: Store, load: Load, index: Index) -> bool:
        """True when ``load`` (at ``index``, over ``host``'s variables) reads the value
        ``store`` wrote, unrounded."""
        return store.index == index and store.dtype == load.dtype == store.value.dtype

    def expr(self, expr: Expr) -> Expr:
        """``expr`` over ``host``'s variables (memoised: shared nodes stay shared)."""
        known = self.done.get(expr)
        if known is None:
            known = self.done[expr] = self._expr(expr)
        return known

    def _expr(self, expr: Expr) -> Expr:
        if isinstance(expr, Load):
            index = self.index(expr.index)
            store = self.stored.get(expr.buffer)
            if store is not None:
                if not self.fits(store, expr, index):  # read elsewhere, or rounded
                    raise NotFusable
                return store.value
            if expr.buffer in self.written:
                raise NotFusable
            return Load(expr.buffer, index, expr.dtype)
        if isinstance(expr, IndirectLoad) and self.gathers:
            if expr.buffer in self.written:
                raise NotFusable
            indirect = self.expr(expr.indirect)
            index = self.index(expr.index)
            return IndirectLoad(expr.buffer, index, indirect, expr.stride, expr.size, expr.dtype)
        if isinstance(expr, IndexValue):
            return IndexValue(self.index(expr.index), expr.dtype)
        if isinstance(expr, Op):
            return Op(expr.name, tuple(self.expr(arg) for arg in expr.args), expr.dtype)
        if isinstance(expr, Constant):
            return expr
        raise NotFusable  # a reduction of another kernel, or a gather not allowed
