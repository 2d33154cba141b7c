"""Ops of the loop IR that are no prim: made by lowering, spelled by each backend.

A value expression's :class:`~torchstrata.inductor.ir.exprs.Op` names a prim (an
elementwise one: :class:`~torchstrata.core.Prim`) or one of these. A backend declares
whether it generates one through ``supports(name, dtype)``, as for prims.
"""

from __future__ import annotations

import enum


class KernelOp(enum.Enum):
    """A loop-IR op that is no prim."""

    #: ``rand_bits(seed, counter, bits)``: the top ``bits`` of prims.rand's counter-based
    #: hash (``core.prims_indexing.rand``) as int64; ``prims.rand`` lowers to it.
    RAND_BITS = "rand_bits"
