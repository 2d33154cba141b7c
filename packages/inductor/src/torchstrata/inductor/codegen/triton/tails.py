"""Tail fusion: a full reduction over a row kernel's rows, finished by its last program.

Cross-entropy's mean is a sum over the rows of values each row kernel program already
holds (the row's log-sum-exp, its picked logit): as a kernel of its own it is one
program reading every row again, launched after the row kernel. Here it becomes the row kernel's *tail*: every program
sums the reduction bodies over its own rows and stores the partial sum in a float32
scratch buffer, takes a ticket (an acq_rel atomic: its partial is published before), and
the program that takes the last ticket adds the partial sums in program order, a fixed
order whichever program finishes last (deterministic), then writes the results and
resets the ticket counter for the next launch.

A kernel ``after`` is fused into a kernel ``host`` before it (``joins.fuse_nearby``) when:

* ``after`` is one row (a full reduction) over exactly ``host``'s rows (its reduced shape
  is ``host``'s row shape), with float32 sums only, one phase, and no full stores;
* ``host`` stores nothing per element, only per row (statistics, losses). A row kernel that
  also writes its rows (cross-entropy's forward with its unit gradient) ran slower with a
  tail than without it plus the tail's own kernel: on the H200, the explicit cross-entropy's
  row kernel took 341 us with its mean as a tail against 313 + 9.7 without, while the
  forward alone, which stores per row only, took 128.9 us with it against 121.6 + 10.3
  (bench/results/2026-12-01-h200-s14-tails.txt);
* ``after``'s results read nothing but its sums (no loads). Not even a single element
  computed before ``host``: cross-entropy's forward with its unit gradients divides its
  mean by a count from an earlier kernel, and with that mean as a tail its row kernel
  took 336-340 us on the H200 against 297 without it, plus 10.5 for the mean's own
  kernel (bench/results/2026-12-01-h200-s13-explicit-ce.txt; moving the tail's
  ticket before the output loop did not change it);
* every buffer of ``host`` that ``after`` loads is a row store of ``host`` read at the
  row it was stored at, as float32: the load becomes the stored value itself (a program
  never reads what its other threads stored).

The rows of ``after``'s reduction become ``host``'s row variables (``r0`` -> ``x0``).
Triton only: a C++ kernel call costs nothing like a GPU launch. On the H200 it saves a
launch but no GPU time at full size (K7 [8192,32000]: 0.158 ms with, 0.156 without;
bench/results/2026-11-30-h200-ce-tail.txt): the row kernel sets cross-entropy's time.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch

from torchstrata.inductor.ir.exprs import (
    IndexValue,
    IndirectLoad,
    Load,
    ReduceRef,
    walk,
)
from torchstrata.inductor.ir.host_bodies import HostBody, NotFusable
from torchstrata.inductor.ir.indexing import Index, Var
from torchstrata.inductor.ir.kernel import Kernel, Store, Tail
from torchstrata.inductor.ir.ranges import substitute
from torchstrata.inductor.schedule.joins import fuse_nearby
from torchstrata.inductor.schedule.scheduler import ExternStep

Step = Kernel | ExternStep
#: Scratch arguments of a kernel with a tail: float32 partial sums, the int32 ticket.
TAIL_PARAMS = ("ts_tail", "ts_tail_count")


def fuse_tails(steps: Sequence[Step]) -> list[Step]:
    """``steps`` with every fusable full reduction made the tail of a kernel before it
    (the plan pass ``triton.fuse_tails``, off with ``InductorOptions(tails=False)``)."""
    return fuse_nearby(steps, fuse_tail)


def tail_scratch(kernel: Kernel) -> tuple[int, int]:
    """Elements of ``ts_tail`` (float32: one partial sum per reduction and program, at most
    one program per row) and ``ts_tail_count`` (int32)."""
    assert kernel.tail is not None
    return len(kernel.tail.reductions) * kernel.rows, 1


def fuse_tail(host: Kernel, after: Kernel) -> Kernel | None:
    """``host`` with ``after`` as its tail, or None when the rules above do not hold."""
    if not _shapes_fit(host, after):
        return None
    rename = _TailBody(host)
    try:
        reductions = tuple(
            attrs.evolve(spec, body=rename.expr(spec.body)) for spec in after.reductions
        )
    except NotFusable:
        return None
    args = {arg.name: arg for arg in host.args}
    for arg in after.args:
        args.setdefault(arg.name, arg)
    return attrs.evolve(
        host,
        args=tuple(args.values()),
        ops=tuple(dict.fromkeys(host.ops + after.ops)),
        tail=Tail(reductions, after.row_stores),
    )


def _shapes_fit(host: Kernel, after: Kernel) -> bool:
    if host.parts or after.parts or host.tail is not None or after.tail is not None:
        return False
    if host.partials is not None or after.partials is not None:
        return False
    if not host.red_shape or host.rows < 2 or after.rows != 1 or after.full_stores:
        return False
    if host.full_stores:  # it would cost more than the launch it saves (module docstring)
        return False
    if tuple(after.red_shape) != tuple(host.row_shape) or not after.reductions:
        return False
    for spec in after.reductions:
        if spec.kind != "sum" or spec.dtype != torch.float32:
            return False
        if any(isinstance(node, ReduceRef) for node in walk(spec.body)):
            return False  # a second phase
    sums = {spec.name for spec in after.reductions}
    for store in after.row_stores:
        for node in walk(store.value):
            if isinstance(node, Load | IndirectLoad | IndexValue):
                return False
            if isinstance(node, ReduceRef) and node.name not in sums:
                return False
    return True


class _TailBody(HostBody):
    """``after``'s bodies over ``host``'s rows (``r{d}`` -> ``x{d}``): gathers move along,
    and a load of a row store must read float32 (see the module docstring)."""

    gathers = True

    def __init__(self, host: Kernel) -> None:
        self.vars = [(f"r{d}", Index.of(Var(f"x{d}", n))) for d, n in enumerate(host.row_shape)]
        super().__init__(self._rows, host, host.row_stores)

    def _rows(self, index: Index) -> Index:
        for name, value in self.vars:
            index = substitute(index, name, value)
        return index

    def fits(self, store: Store, load: Load, index: Index) -> bool:
        """The stored element, float32 all the way."""
        return super().fits(store, load, index) and load.dtype == torch.float32
