"""How each view prim rewrites an index: the output index of a view as its operand's.

``VIEW_INDEX[name](in_shape, out_shape, *args)`` returns the transform; lowering makes a
view a :class:`~torchstrata.inductor.schedule.lowering.Pointwise` that asks its operand
for the transformed index, so a chain of views over an input becomes one strided load.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torchstrata.inductor.ir.indexing import Index, delinearize, linear_offset, row_major_strides

IndexTuple = tuple[Index, ...]


def _broadcast_index(
    in_shape: Sequence[int], out_shape: Sequence[int], shape: Any, broadcast_dims: Sequence[int]
) -> Callable[[IndexTuple], IndexTuple]:
    pairs = [
        (out_dim, in_shape[i] == out_shape[out_dim]) for i, out_dim in enumerate(broadcast_dims)
    ]
    return lambda index: tuple(index[out_dim] if same else Index() for out_dim, same in pairs)


def _permute_index(
    in_shape: Sequence[int], out_shape: Sequence[int], dims: Sequence[int]
) -> Callable[[IndexTuple], IndexTuple]:
    inverse = [0] * len(dims)
    for out_dim, in_dim in enumerate(dims):
        inverse[in_dim] = out_dim
    return lambda index: tuple(index[inverse[d]] for d in range(len(dims)))


def _slice_index(
    in_shape: Sequence[int],
    out_shape: Sequence[int],
    starts: Sequence[int],
    limits: Sequence[int],
    steps: Sequence[int],
) -> Callable[[IndexTuple], IndexTuple]:
    return lambda index: tuple(
        i * step + start for i, start, step in zip(index, starts, steps, strict=True)
    )


def _reshape_index(
    in_shape: Sequence[int], out_shape: Sequence[int], shape: Any
) -> Callable[[IndexTuple], IndexTuple]:
    out_strides = row_major_strides(out_shape)
    return lambda index: tuple(delinearize(linear_offset(index, out_strides), in_shape))


def _as_strided_index(
    in_shape: Sequence[int],
    out_shape: Sequence[int],
    shape: Any,
    strides: Sequence[int],
    offset: int,
) -> Callable[[IndexTuple], IndexTuple]:
    # The operand is a computed value, hence contiguous: its storage is its row-major order.
    return lambda index: tuple(delinearize(linear_offset(index, strides, offset), in_shape))


VIEW_INDEX: dict[str, Callable[..., Callable[[IndexTuple], IndexTuple]]] = {
    "broadcast_in_dim": _broadcast_index,
    "permute": _permute_index,
    "slice": _slice_index,
    "reshape": _reshape_index,
    "as_strided": _as_strided_index,
}
