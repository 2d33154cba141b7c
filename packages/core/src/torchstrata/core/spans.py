"""Storage spans: the first and last storage element (or byte) that the elements of a
strided view lie in, and whether two such spans intersect.

A view with sizes ``shape``, strides ``strides`` and storage offset ``offset`` reads the
elements ``offset + sum(i_d * strides[d])`` of its storage; the smallest and largest of
those bound its *span*. Two views of one storage can share an element only if their spans
intersect, so a span test is a cheap, conservative test of sharing memory: interleaved
views (the even and the odd columns of a matrix) have intersecting spans but no common
element, and count as sharing.

Spans are inclusive ``(first, last)`` pairs; a view without elements has none (None),
and None intersects nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

#: ``(first, last)``: the inclusive bounds of a span, in elements or in bytes.
Span = tuple[int, int]


def element_span(shape: Sequence[int], strides: Sequence[int], offset: int = 0) -> Span | None:
    """The first and last storage element that a view's elements lie in, or None when it
    has no elements.

    :param shape: the view's sizes.
    :param strides: its strides, in elements; a stride of 0 (a broadcast dimension) adds
        nothing, a negative one (which torch never makes) extends the span downwards.
    :param offset: the storage element of the view's element ``(0, ..., 0)`` (its
        ``storage_offset()``).
    """
    first = last = offset
    for size, stride in zip(shape, strides, strict=True):
        if not size:
            return None
        reach = (size - 1) * stride
        if reach > 0:
            last += reach
        else:
            first += reach
    return first, last


def byte_span(
    shape: Sequence[int], strides: Sequence[int], first_byte: int, element_size: int
) -> Span | None:
    """The first and last byte that a view's elements lie in (every byte of its first and
    last element), or None when it has no elements.

    :param first_byte: the address of the view's element ``(0, ..., 0)``: its
        ``data_ptr()`` for addresses, or ``storage_offset() * element_size()`` for bytes
        counted from the start of its storage.
    :param element_size: bytes per element; views of one storage with different dtypes
        compare correctly only in bytes.
    """
    span = element_span(shape, strides)
    if span is None:
        return None
    first, last = span
    return first_byte + first * element_size, first_byte + (last + 1) * element_size - 1


def spans_overlap(first: Span | None, second: Span | None) -> bool:
    """Whether two spans (of one storage, in one unit) intersect; an empty one (None)
    intersects nothing. Adjacent spans (one ends where the next starts) do not."""
    if first is None or second is None:
        return False
    return first[0] <= second[1] and second[0] <= first[1]


def tensor_element_span(tensor: torch.Tensor) -> Span | None:
    """:func:`element_span` of a real, fake or meta tensor: storage elements counted from
    the start of its storage (a fake tensor's symbolic offset kept symbolic: comparing
    spans then records conditions, where ``int()`` would pin the offset's sizes)."""
    offset: Any = tensor.storage_offset()  # an int, or a fake tensor's SymInt
    return element_span(tensor.shape, tensor.stride(), offset)


def tensor_byte_span(tensor: torch.Tensor) -> Span | None:
    """:func:`byte_span` of a real tensor, as memory addresses (from ``data_ptr()``)."""
    return byte_span(tensor.shape, tensor.stride(), tensor.data_ptr(), tensor.element_size())
