"""The strides of a reshape that is a view, computed on sizes that may be symbolic.

ATen's ``computeStride`` (what ``Tensor.view`` runs), in Python, so that a symbolic
lowering's ``core.SizeValue`` sizes go through it and record each comparison it makes
(decision 0382); a meta tensor cannot hold them. Shapes of ints keep the meta tensor's
answer (:func:`view_strides` is called for symbolic shapes only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def view_strides(
    shape: Sequence[Any], strides: Sequence[Any], new_shape: Sequence[Any]
) -> tuple[Any, ...] | None:
    """The strides of ``new_shape`` viewing a tensor of ``shape`` and ``strides``, or
    None where the reshape is no view (or where a dim is 0: left to the caller's copy)."""
    # compared, not type-tested: a symbolic size that is 0 here (``s0 - 2`` at 2) takes the
    # copy too, and where it is not, the lowering records it (decision 0405)
    if any(size == 0 for size in (*shape, *new_shape)):
        return None
    if not shape:  # a 0-d tensor: every new dim is 1
        return tuple(1 for _ in new_shape)
    new: list[Any] = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = strides[-1]
    tensor_numel: Any = 1
    view_numel: Any = 1
    for tensor_d in range(len(shape) - 1, -1, -1):
        tensor_numel = tensor_numel * shape[tensor_d]
        if tensor_d == 0 or (
            shape[tensor_d - 1] != 1 and strides[tensor_d - 1] != tensor_numel * chunk_base_stride
        ):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new[view_d] = view_numel * chunk_base_stride
                view_numel = view_numel * new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = strides[tensor_d - 1]
                tensor_numel = 1
                view_numel = 1
    if view_d != -1:
        return None
    return tuple(new)
