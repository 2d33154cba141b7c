"""Shifted exps: a row's ``exp(v - max(v))`` as ``exp2(t + 24) * 2**-24`` on Triton.

The GPU's exp unit (``MUFU.EX2``) flushes results below 2**-126 to zero. ``tl.exp`` keeps
them with three more instructions per element (a range test, a pre-scale and a square),
which a softmax's output walk, a handful of instructions per element, feels: on the
H200 they are 3 of its 10.5 (``bench/results/2026-12-01-h200-k3-s11.txt``).

``v - max(v)`` is at most 0, so ``t + 24`` (``t = (v - max(v)) * log2 e``) is at most 24:
``exp2`` of it never overflows, and is flushed only where ``t < -150``, where the true
result is below half of float32's smallest subnormal (2**-149) and rounds to zero
anyway. The exact power-of-two scale ``2**-24`` then brings every result back, subnormals
included. Where the exp is multiplied by the reciprocal of its own row's sum (softmax:
a value in ``[1/n, 1]``), the scale joins that per-row multiplier and costs nothing per
element; otherwise it is one multiplication.

The price is the argument's rounding: ``t + 24`` carries about ``ulp(24) / 2`` absolute
error where ``|t|`` is small, a relative error of about 1e-6 in the result, the size of
what ``tl.exp``'s approximate ``ex2`` and its rounded ``t`` already give for ``|t|`` near
24. Measured on float32 softmax outputs: 1.0e-6 against 6.0e-7 at unit logits, 2.1e-6
against 3.3e-6 at logits spread by 60. Only float32 compute is shifted (float64 never
reaches this unit). ``InductorOptions(shifted_exps=False)`` keeps ``tl.exp``.
"""

from __future__ import annotations

import attrs

from torchstrata.inductor.codegen.triton.printer import LOG2_E
from torchstrata.inductor.ir.exprs import FLOAT32_COMPUTED, Constant, Expr, Op, ReduceRef, map_ops
from torchstrata.inductor.ir.kernel import Kernel, ReductionSpec
from torchstrata.inductor.ir.online import online_pairs

#: The shift of the base-2 exponent, and the exact scale that undoes it.
SHIFT = 24.0
SCALE = 2.0**-SHIFT


def shift_row_exps(kernel: Kernel) -> Kernel:
    """``kernel`` with the ``exp(v - max(v))`` of its stored values shifted (see the
    module docstring); the same kernel when there is none (the Triton backend asks only
    with ``InductorOptions.shifted_exps``)."""
    if not kernel.reductions:
        return kernel
    maxima = {
        spec.name: spec
        for spec in kernel.reductions
        if spec.kind == "amax" and spec.dtype in FLOAT32_COMPUTED
    }
    if not maxima:
        return kernel
    sum_of = {s: m.name for s, m in online_pairs(kernel.reductions, counts=True).items()}
    shifted: dict[Expr, str] = {}  # exp2(t + SHIFT) -> the max it is taken against

    def rewrite(op: Op) -> Expr:
        if op.name == "exp":
            peak = _row_max_of(op, maxima)
            if peak is None:
                return op
            dtype = op.dtype
            exponent = Op("mul", (op.args[0], Constant(LOG2_E, dtype)), dtype)
            raised = Op("exp2", (Op("add", (exponent, Constant(SHIFT, dtype)), dtype),), dtype)
            shifted[raised] = peak
            return Op("mul", (raised, Constant(SCALE, dtype)), dtype)
        if op.name == "mul":
            return _fold_scale(op, shifted, sum_of)
        return op

    memo: dict[Expr, Expr] = {}
    stores = tuple(
        attrs.evolve(store, value=map_ops(store.value, rewrite, memo))
        for store in kernel.full_stores
    )
    if not shifted:
        return kernel
    return attrs.evolve(kernel, full_stores=stores)


def _row_max_of(op: Op, maxima: dict[str, ReductionSpec]) -> str | None:
    """The name of the max that ``op``, an exp, is ``exp(v - max(v))`` of, or None."""
    if op.dtype not in FLOAT32_COMPUTED:
        return None
    inner = op.args[0]
    if not (isinstance(inner, Op) and inner.name == "sub"):
        return None
    value, peak = inner.args
    if not isinstance(peak, ReduceRef) or peak.name not in maxima:
        return None
    return peak.name if maxima[peak.name].body == value else None


def _fold_scale(op: Op, shifted: dict[Expr, str], sum_of: dict[str, str]) -> Expr:
    """``(exp2(...) * SCALE) * (1 / sum)`` as ``exp2(...) * ((1 / sum) * SCALE)`` when the
    sum is the row's sum of these exps (it lies in [1, n], so the scaled reciprocal stays
    a normal float32 and the scale is exact)."""
    scaled, multiplier = op.args
    if not (isinstance(scaled, Op) and scaled.name == "mul"):
        return op
    raised, scale = scaled.args
    if scale != Constant(SCALE, op.dtype) or raised not in shifted:
        return op
    if not (isinstance(multiplier, Op) and multiplier.name == "div"):
        return op
    one, total = multiplier.args
    if one != Constant(1.0, op.dtype) or not isinstance(total, ReduceRef):
        return op
    if sum_of.get(total.name) != shifted[raised]:
        return op
    return Op("mul", (raised, Op("mul", (multiplier, scale), op.dtype)), op.dtype)
