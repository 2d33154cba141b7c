"""The order a pointwise kernel walks its elements in: its output's memory order.

A kernel's flat index is split into loop variables row-major over the domain's shape, so
consecutive lanes touch consecutive addresses only where the stored buffers are
row-major. Elementwise results take eager's layout (channels-last in, channels-last
out: see ``decomp.layouts``), so a pointwise kernel over channels-last or transposed
tensors walks its domain in that layout's order instead: the loop variables follow the
stored buffer's strides, slowest first, and loads and stores stay contiguous.
"""

from __future__ import annotations

import math
from collections.abc import Container, Mapping

from torchstrata.core import Node, TensorMeta, is_dense, same_size, same_sizes
from torchstrata.inductor.schedule.lowering import Lowered, Pointwise, Reduction


def row_order(
    row_shape: tuple[int, ...],
    red_shape: tuple[int, ...],
    members: list[Node],
    lowered: Mapping[Node, Lowered],
    stored: Container[Node] = (),
) -> tuple[int, ...]:
    """The row dimensions of a kernel, slowest first, in the order it walks them.

    Row-major (``0, 1, ...``) unless the kernel is pointwise and its last member over the
    whole domain is laid out densely in another order: then that order (size-one
    dimensions first: their variables are always 0). A row-major CPU kernel whose
    full-size operands share one other order walks that order (:func:`_operands_order`;
    ``stored``: the values earlier kernels store, loaded rather than computed inline)."""
    identity = tuple(range(len(row_shape)))
    if red_shape or 0 in row_shape:
        return identity  # reductions keep their rows; an empty domain runs no kernel
    if any(isinstance(lowered.get(member), Reduction) for member in members):
        return identity
    for member in reversed(members):
        meta = member.tensor_meta
        if same_sizes(meta.shape, row_shape) and is_dense(meta.shape, meta.strides):
            order = _walk(row_shape, meta.strides)
            if order == identity and meta.device.type == "cpu":
                return _operands_order(row_shape, members, lowered, stored) or identity
            return order
    return identity


#: The most elements walked between two stores to one cache line of a row-major value
#: stored across the walked order (that many lines, 64 bytes each, stay in L1).
SHORT_INNER = 256


def _walk(row_shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...]:
    """The dimensions in the order of ``strides``, slowest first (size-one ones first)."""
    identity = tuple(range(len(row_shape)))
    # by expression: a symbolic size that is 1 at this call only spans (decision 0406)
    ones = [d for d in identity if same_size(row_shape[d], 1)]
    spans = sorted((d for d in identity if d not in ones), key=lambda d: -strides[d])
    return tuple(ones + spans) if spans != sorted(spans) else identity


def _operands_order(
    row_shape: tuple[int, ...],
    members: list[Node],
    lowered: Mapping[Node, Lowered],
    stored: Container[Node],
) -> tuple[int, ...] | None:
    """The one permuted order all of a row-major CPU kernel's full-size operands are laid
    out in (channels-last convolution results and their inputs' copies, stored row-major
    into a graph output: decision 0370), else None.

    Walked in their order, the kernel loads each contiguously and stores the row-major
    value with a stride along the short innermost dim (M4's channels), whose cache lines
    stay in L1 across rows; walked row-major, it loads every operand across the long
    rows (0.70 ms against 0.16 ms for M4's last kernel, one thread). Only where the store
    comes back to a cache line within :data:`SHORT_INNER` elements, sooner than the loads
    of the row-major walk would."""
    seen = set(members)
    stack = [operand for member in members for operand in member.input_nodes()]
    orders = set()
    while stack:
        operand = stack.pop()
        meta = operand.meta
        if operand in seen or not isinstance(meta, TensorMeta):
            continue
        if not same_sizes(meta.shape, row_shape):
            continue
        seen.add(operand)
        if isinstance(lowered.get(operand), Pointwise) and operand not in stored:
            stack.extend(operand.input_nodes())  # computed inline: its operands are loaded
            continue
        if not is_dense(meta.shape, meta.strides):
            return None
        orders.add(_walk(row_shape, meta.strides))
    if len(orders) != 1:
        return None
    (order,) = orders
    if order == tuple(range(len(row_shape))):
        return None
    # Elements walked between two uses of one cache line: the row-major store's across
    # the operands' order, an operand's across the row-major order.
    last = len(row_shape) - 1
    store_reuse = math.prod(row_shape[d] for d in order[order.index(last) + 1 :])
    load_reuse = math.prod(row_shape[order[-1] + 1 :])
    return order if store_reuse <= SHORT_INNER and store_reuse < load_reuse else None
