"""The metadata of a graph input under a symbolic scope: its dynamic dimensions as
symbols (see :mod:`torchstrata.core.symbolic`)."""

from __future__ import annotations

import torch

from torchstrata.core.int_arguments import int_argument_source
from torchstrata.core.meta import TensorMeta, is_dense
from torchstrata.core.symbolic import active_symbolic_sizes


def input_meta(source: str, tensor: torch.Tensor) -> TensorMeta:
    """:meth:`TensorMeta.from_tensor`, with the dimensions the active symbolic scope
    makes dynamic for ``source`` as symbols. A densely laid out tensor gets strides
    over the symbols (a permutation of row-major); any other layout stays static."""
    meta = TensorMeta.from_tensor(tensor)
    sizes = active_symbolic_sizes()
    if sizes is None or not sizes.dims.get(source):
        return meta
    if int_argument_source(source) is not None:  # an int's size carrier: stride 0
        size = sizes.size(source, 0, meta.shape[0])
        return TensorMeta((size,), meta.dtype, meta.device, (0,), False)
    if not is_dense(meta.shape, meta.strides) or tensor.storage_offset() != 0:
        sizes.refused[source] = "its layout is not dense"
        return meta
    shape = tuple(sizes.size(source, dim, size) for dim, size in enumerate(meta.shape))
    # The dims from innermost to outermost stride (ties: the later dim is inner).
    order = sorted(range(len(shape)), key=lambda d: (meta.strides[d], -d))
    strides: list[object] = [0] * len(shape)
    running: object = 1
    for dim in order:
        strides[dim] = running
        running = running * (shape[dim] if meta.shape[dim] > 1 else 1)  # type: ignore[operator]
    return TensorMeta(shape, meta.dtype, meta.device, tuple(strides), meta.requires_grad)  # type: ignore[arg-type]
