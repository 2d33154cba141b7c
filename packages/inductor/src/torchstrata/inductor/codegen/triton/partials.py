"""Column partial sums fused into the row kernel that reads the same rows.

A norm's backward computes, per row, the input gradient (reductions along the row), and
over all rows the weight and bias gradients (column sums of ``dy * xhat`` and ``dy``).
``split_sums`` makes each column sum two levels: partial sums over chunks of ``C`` rows
(a kernel of its own that reads ``x`` and ``dy`` again), then a small sum of the partials.
Here the first level joins the row kernel: program ``p`` computes the row kernel's rows
``[p*C, (p+1)*C)``, ``XBLOCK`` at a time, adds the column bodies of each block of rows into
per-column accumulators, and stores its partial sums once at the end. The rows are read
once for both (eager's and torch.compile's norm backward kernels do the same).

A kernel ``after`` joins a kernel ``host`` nearby (before or after it in the plan, moved
past independent steps by ``joins.fuse_nearby``) when:

* ``host`` reduces rows of ``N`` elements (that fit one persistent tile) and ``after``
  sums float32 values over ``C`` rows for every ``(part, column)``: its rows are
  ``(S, *host's reduced shape)``, ``S * C`` is ``host``'s row count;
* ``after`` has one phase, no full stores, and its stored values read only its sums;
* what ``after`` loads from a buffer ``host`` writes is ``host``'s full store at the same
  element, unrounded (the value itself is used), and it gathers nothing.

``after``'s part ``s``, row ``j`` and column ``n`` become ``host``'s row ``m = s*C + j``
(``s = m // C``, ``j = m % C``, folded back into ``m`` by the index algebra) and reduced
variables. Triton only (the C++ backend walks columns itself); ``InductorOptions(partials=False)``
turns it off for side-by-side measurements.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import torch

from torchstrata.inductor.ir.exprs import Constant, Op, ReduceRef, walk
from torchstrata.inductor.ir.host_bodies import HostBody, NotFusable
from torchstrata.inductor.ir.indexing import Index, Var, fold_div_mod, row_major_strides
from torchstrata.inductor.ir.kernel import Kernel, Partials, red_vars, row_vars
from torchstrata.inductor.ir.ranges import substitute
from torchstrata.inductor.schedule.joins import fuse_nearby
from torchstrata.inductor.schedule.scheduler import ExternStep

Step = Kernel | ExternStep
#: Longest row of a host kernel: the row is one tile, with the column accumulators.
MAX_ROW = 16384


def fuse_partials(steps: Sequence[Step]) -> list[Step]:
    """``steps`` with every fusable column partial sum joined to a row kernel nearby (the
    plan pass ``triton.fuse_partials``, off with ``InductorOptions(partials=False)``)."""
    return fuse_nearby(steps, fuse_partial, hosts_after=True)


def fuse_partial(host: Kernel, after: Kernel) -> Kernel | None:
    """``host`` computing ``after``'s partial sums too, or None (rules above)."""
    chunk = _chunk(host, after)
    if chunk is None:
        return None
    programs = host.rows // chunk
    strides = row_major_strides(host.row_shape)
    row = Index.constant(0)
    for var, stride in zip(row_vars(host.row_shape), strides, strict=True):
        row = row + Index.of(var) * stride
    columns = {f"x{d + 1}": Index.of(var) for d, var in enumerate(red_vars(host.red_shape))}
    sizes = {var.name: var.size for var in (*row_vars(after.row_shape), *red_vars(after.red_shape))}
    body_vars = {"x0": row.floordiv(chunk), "r0": row.mod(chunk), **columns}
    rename = HostBody(_Substitution(body_vars, sizes), host, host.full_stores)
    try:
        reductions = tuple(
            attrs.evolve(spec, body=rename.expr(spec.body)) for spec in after.reductions
        )
    except NotFusable:
        return None
    store_vars = _Substitution({"x0": Index.of(Var("xp", programs)), **columns}, sizes)
    stores = tuple(attrs.evolve(s, index=store_vars(s.index)) for s in after.row_stores)
    args = {arg.name: arg for arg in host.args}
    for arg in after.args:
        args.setdefault(arg.name, arg)
    return attrs.evolve(
        host,
        args=tuple(args.values()),
        ops=tuple(dict.fromkeys(host.ops + after.ops)),
        partials=Partials(chunk, programs, reductions, stores),
    )


def _chunk(host: Kernel, after: Kernel) -> int | None:
    """``C``, the rows per part, when the shapes and contents fit (rules above)."""
    for kernel in (host, after):
        if kernel.parts or kernel.tail is not None or kernel.partials is not None:
            return None
    if not host.red_shape or host.row_length > MAX_ROW or after.full_stores:
        return None
    if len(after.red_shape) != 1 or tuple(after.row_shape[1:]) != tuple(host.red_shape):
        return None
    chunk, parts = after.red_shape[0], after.row_shape[0]
    if parts < 2 or parts * chunk != host.rows or not after.reductions:
        return None
    for spec in after.reductions:
        if spec.kind != "sum" or spec.dtype != torch.float32:
            return None
        if any(isinstance(node, ReduceRef) for node in walk(spec.body)):
            return None
    sums = {spec.name for spec in after.reductions}
    for store in after.row_stores:
        for node in walk(store.value):
            if not isinstance(node, Op | Constant | ReduceRef):
                return None
            if isinstance(node, ReduceRef) and node.name not in sums:
                return None
    return chunk


@attrs.frozen
class _Substitution:
    """Simultaneous replacement of loop variables in an index (through temporary names,
    so that a replacement may mention a replaced name), then the quotient-and-remainder
    fold."""

    values: Mapping[str, Index]
    sizes: Mapping[str, int]

    def __call__(self, index: Index) -> Index:
        for name in self.values:
            index = substitute(index, name, Index.of(Var(f"_{name}", self.sizes[name])))
        for name, value in self.values.items():
            index = substitute(index, f"_{name}", value)
        return fold_div_mod(index)
