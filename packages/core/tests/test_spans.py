"""Storage spans of strided views (``torchstrata.core.spans``), checked against the
storage elements that ``as_strided`` views of a numbered storage actually read."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from torchstrata.core import (
    byte_span,
    element_span,
    spans_overlap,
    tensor_byte_span,
    tensor_element_span,
)


def _touched(shape, strides, offset):
    """The storage elements that an ``as_strided`` view reads, by reading them."""
    storage = torch.arange(200)
    return set(storage.as_strided(shape, strides, offset).flatten().tolist())


@pytest.mark.parametrize(
    ("shape", "strides", "offset"),
    [
        ((), (), 7),  # a scalar
        ((5,), (1,), 0),
        ((3, 4), (4, 1), 2),
        ((4, 3), (1, 4), 0),  # transposed
        ((2, 3), (12, 2), 5),  # strided: gaps between elements
        ((3, 1, 4), (4, 99, 1), 1),  # a size-one dimension's stride moves nothing
        ((3, 4), (0, 1), 3),  # stride 0: a broadcast row
        ((3, 4), (0, 0), 9),  # every element the same one
        ((2, 2), (1, 1), 0),  # self-overlapping
    ],
)
def test_the_span_bounds_exactly_the_elements_read(shape, strides, offset):
    touched = _touched(shape, strides, offset)
    assert element_span(shape, strides, offset) == (min(touched), max(touched))


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4), (2, 0, 5)])
def test_a_view_without_elements_has_no_span(shape):
    strides = (5,) * len(shape)
    assert element_span(shape, strides, 4) is None
    assert byte_span(shape, strides, 1000, 4) is None
    empty = torch.empty(shape)
    assert tensor_element_span(empty) is None
    assert tensor_byte_span(empty) is None
    assert not spans_overlap(None, (0, 10))
    assert not spans_overlap((0, 10), None)
    assert not spans_overlap(None, None)


def test_negative_strides_extend_the_span_downwards():
    # torch makes no negative strides; the arithmetic still holds for them
    assert element_span((3,), (-2,), 10) == (6, 10)
    assert element_span((3, 2), (-4, 1), 10) == (2, 11)
    assert byte_span((3,), (-2,), 100, 4) == (84, 103)


def test_overlapping_adjacent_and_disjoint_spans():
    assert spans_overlap((0, 4), (4, 9))  # one shared element
    assert spans_overlap((2, 3), (0, 9))  # one inside the other
    assert spans_overlap((5, 5), (5, 5))
    assert not spans_overlap((0, 4), (5, 9))  # adjacent: no element in common
    assert not spans_overlap((5, 9), (0, 4))
    assert not spans_overlap((0, 1), (7, 9))


def test_byte_spans_cover_every_byte_of_the_first_and_last_element():
    assert byte_span((4,), (1,), 0, 4) == (0, 15)
    assert byte_span((2, 3), (3, 1), 8, 2) == (8, 19)
    assert byte_span((), (), 16, 8) == (16, 23)
    assert byte_span((3,), (0,), 16, 8) == (16, 23)  # a broadcast scalar


def test_views_of_one_storage_with_different_element_sizes_compare_in_bytes():
    buffer = torch.zeros(8, dtype=torch.float32)
    as_bytes = buffer.view(torch.uint8)  # 32 bytes over the same memory
    assert spans_overlap(tensor_byte_span(buffer[3:4]), tensor_byte_span(as_bytes[12:13]))
    assert spans_overlap(tensor_byte_span(buffer[3:4]), tensor_byte_span(as_bytes[15:16]))
    assert not spans_overlap(tensor_byte_span(buffer[3:4]), tensor_byte_span(as_bytes[16:20]))
    assert not spans_overlap(tensor_byte_span(buffer[3:4]), tensor_byte_span(as_bytes[8:12]))
    # in elements, the two dtypes' offsets would not be comparable
    assert tensor_element_span(buffer[3:4]) == (3, 3)
    assert tensor_element_span(as_bytes[12:13]) == (12, 12)


def test_tensor_spans_follow_the_tensors_layout():
    base = torch.zeros(6, 5)
    column = base[1:, 2]
    assert tensor_element_span(column) == (7, 27)
    start = base.data_ptr()
    assert tensor_byte_span(column) == (start + 7 * 4, start + 28 * 4 - 1)
    expanded = base[2].expand(3, 5)  # stride 0 over rows
    assert tensor_element_span(expanded) == (10, 14)
    assert spans_overlap(tensor_element_span(expanded), tensor_element_span(column))
    assert not spans_overlap(tensor_element_span(base[0]), tensor_element_span(base[1]))


def test_fake_tensors_have_element_spans():
    with FakeTensorMode():
        view = torch.empty(4, 6)[1:, ::2]
        assert tensor_element_span(view) == (6, 22)
