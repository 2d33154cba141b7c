"""Float32 through a kernel: a 16-bit chain's intermediates not rounded (decision 0525).

Eager computes each op of a bf16 or fp16 chain in float32 and stores its result in 16
bits, and a decomposed chain says so: ``convert(convert(v, bf16), float32)`` between two
ops, which both backends generate as a rounding (``ts_round_bf16``, ``_ts_round_bf16``):
the compiled kernel's results are eager's bit for bit. torch.compile by default keeps the
float32 value through a fused kernel and rounds only where it stores (Inductor's
``emulate_precision_casts`` off). Where ``InductorOptions(half_roundings=False)`` asks
for the same, :func:`drop_half_roundings` replaces each such pair by the float32 value it
rounds: no rounding inside the kernel, one at each 16-bit store (a store's own narrowing,
not a pair). Results are then torch.compile's kind: nearer the exact value than eager's,
not eager's bits. The C++ backend gains most (a rounding per element per op costs more
than the op); memory-bound Triton kernels hardly notice.
"""

from __future__ import annotations

import attrs
import torch

from torchstrata.inductor.ir.exprs import Expr, Op, map_ops
from torchstrata.inductor.ir.kernel import Kernel, ReductionSpec, Store

#: The 16-bit dtypes whose round trips are dropped.
HALF_DTYPES = frozenset({torch.bfloat16, torch.float16})
#: The dtypes whose value a round trip through 16 bits gives back unrounded.
WIDE_DTYPES = frozenset({torch.float32, torch.float64})


def drop_half_roundings(kernel: Kernel) -> Kernel:
    """``kernel`` with each ``convert(convert(v, half), wide)`` whose ``v`` is float32
    replaced by ``v`` (in its parts, reductions, stores, tail and partials too); the same
    kernel when it has none."""
    memo: dict[Expr, Expr] = {}

    def value(expr: Expr) -> Expr:
        return map_ops(expr, _unrounded, memo)

    def specs(items: tuple[ReductionSpec, ...]) -> tuple[ReductionSpec, ...]:
        return tuple(attrs.evolve(spec, body=value(spec.body)) for spec in items)

    def stores(items: tuple[Store, ...]) -> tuple[Store, ...]:
        return tuple(attrs.evolve(store, value=value(store.value)) for store in items)

    rewritten = attrs.evolve(
        kernel,
        reductions=specs(kernel.reductions),
        row_stores=stores(kernel.row_stores),
        full_stores=stores(kernel.full_stores),
        parts=tuple(drop_half_roundings(part) for part in kernel.parts),
        tail=None
        if kernel.tail is None
        else attrs.evolve(
            kernel.tail, reductions=specs(kernel.tail.reductions), stores=stores(kernel.tail.stores)
        ),
        partials=None
        if kernel.partials is None
        else attrs.evolve(
            kernel.partials,
            reductions=specs(kernel.partials.reductions),
            stores=stores(kernel.partials.stores),
        ),
    )
    return kernel if rewritten == kernel else rewritten


def _unrounded(op: Op) -> Expr:
    """``v`` for ``convert(convert(v, half), wide)`` with ``v`` float32, else ``op``."""
    if op.name != "convert_element_type" or op.dtype not in WIDE_DTYPES:
        return op
    (inner,) = op.args
    if not (
        isinstance(inner, Op)
        and inner.name == "convert_element_type"
        and inner.dtype in HALF_DTYPES
    ):
        return op
    (value,) = inner.args
    if value.dtype is not torch.float32:
        return op
    if op.dtype is torch.float32:
        return value
    return Op("convert_element_type", (value,), op.dtype)
