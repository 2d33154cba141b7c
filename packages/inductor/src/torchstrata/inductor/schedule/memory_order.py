"""The order a pointwise kernel walks its elements in: its output's memory order.

A kernel's flat index is split into loop variables row-major over the domain's shape, so
consecutive lanes touch consecutive addresses only where the stored buffers are
row-major. Elementwise results take eager's layout (channels-last in, channels-last
out: see ``decomp.layouts``), so a pointwise kernel over channels-last or transposed
tensors walks its domain in that layout's order instead: the loop variables follow the
stored buffer's strides, slowest first, and loads and stores stay contiguous.
"""

from __future__ import annotations

from collections.abc import Mapping

from torchstrata.core import Node, is_dense
from torchstrata.inductor.schedule.lowering import Lowered, Reduction


def row_order(
    row_shape: tuple[int, ...],
    red_shape: tuple[int, ...],
    members: list[Node],
    lowered: Mapping[Node, Lowered],
) -> tuple[int, ...]:
    """The row dimensions of a kernel, slowest first, in the order it walks them.

    Row-major (``0, 1, ...``) unless the kernel is pointwise and its last member over the
    whole domain is laid out densely in another order: then that order (size-one
    dimensions first: their variables are always 0)."""
    identity = tuple(range(len(row_shape)))
    if red_shape or 0 in row_shape:
        return identity  # reductions keep their rows; an empty domain runs no kernel
    if any(isinstance(lowered.get(member), Reduction) for member in members):
        return identity
    for member in reversed(members):
        meta = member.tensor_meta
        if meta.shape == row_shape and is_dense(meta.shape, meta.strides):
            ones = [d for d in identity if row_shape[d] == 1]
            spans = sorted(
                (d for d in identity if row_shape[d] > 1), key=lambda d: -meta.strides[d]
            )
            return tuple(ones + spans) if spans != sorted(spans) else identity
    return identity
