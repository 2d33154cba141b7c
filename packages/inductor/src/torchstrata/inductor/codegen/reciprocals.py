"""Reciprocals: a division by a per-row value becomes a multiplication by its reciprocal.

Softmax ends ``exp(x - max) / sum``: one division per element by a value that is the
same for the whole row. A float32 division is an instruction sequence (Triton emits
``div.full.f32``; C++ an IEEE divide), a multiplication is one instruction, and a
memory-bound row kernel whose loop is a handful of float operations feels the
difference. Where the numerator varies along the reduced dims and the divisor does not,
``a / b`` is generated as ``a * (1 / b)``; the emitter computes ``1 / b`` once per row,
outside the loop over the row.

The product differs from the quotient by at most about one unit in the last place of
float32 (the reciprocal's rounding, then the product's). Float64 divisions are left
alone: who computes in float64 asked for the correctly rounded quotient.
``InductorOptions(reciprocals=False)`` keeps every division.
"""

from __future__ import annotations

import attrs

from torchstrata.inductor.ir.exprs import FLOAT32_COMPUTED, Constant, Expr, Op, map_ops, variables
from torchstrata.inductor.ir.kernel import Kernel, red_vars


def hoist_reciprocals(kernel: Kernel) -> Kernel:
    """``kernel`` with its divisions by per-row values turned into multiplications by
    their reciprocals (see the module docstring); the same kernel when it has none (the
    backends ask only with ``InductorOptions.reciprocals``)."""
    if not kernel.red_shape:
        return kernel
    along = frozenset(var.name for var in red_vars(kernel.red_shape))
    changed = False

    def rewrite(op: Op) -> Expr:
        nonlocal changed
        if op.name != "div" or op.dtype not in FLOAT32_COMPUTED:
            return op
        numerator, divisor = op.args
        if not variables(numerator) & along or variables(divisor) & along:
            return op
        changed = True
        inverse = Op("div", (Constant(1.0, op.dtype), divisor), op.dtype)
        return Op("mul", (numerator, inverse), op.dtype)

    memo: dict[Expr, Expr] = {}
    reductions = tuple(
        attrs.evolve(spec, body=map_ops(spec.body, rewrite, memo)) for spec in kernel.reductions
    )
    stores = tuple(
        attrs.evolve(store, value=map_ops(store.value, rewrite, memo))
        for store in kernel.full_stores
    )
    if not changed:
        return kernel
    return attrs.evolve(kernel, reductions=reductions, full_stores=stores)
