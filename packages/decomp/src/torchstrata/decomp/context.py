"""The helper layer rules build on: prims, casts, promotion, broadcasting, dims."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from torchstrata.core import (
    GraphBuilder,
    Node,
    OpRef,
    PrimFamily,
    TensorMeta,
    aten,
    get_prim,
    prim,
)
from torchstrata.decomp.promotion import Promotion, computation_dtype, promoted_dtypes
from torchstrata.decomp.table import NotDecomposable

Scalar = bool | int | float

#: Shorter value names for the prims rules use most.
_SHORT_NAMES = {"convert_element_type": "cast", "broadcast_in_dim": "bcast"}


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The broadcast of ``shapes`` under NumPy/PyTorch rules."""
    rank = max((len(shape) for shape in shapes), default=0)
    result = [1] * rank
    for shape in shapes:
        for offset, size in enumerate(shape, start=rank - len(shape)):
            if size != 1 and result[offset] not in (1, size):
                raise NotDecomposable(f"shapes {shapes} do not broadcast")
            if size != 1:
                result[offset] = size
    return tuple(result)


def canonical_dim(dim: int, ndim: int) -> int:
    """``dim`` in ``[0, ndim)`` (a 0-dim tensor accepts 0 and -1, like torch)."""
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise IndexError(f"dim {dim} out of range for rank {ndim}")
    return dim % rank


def canonical_dims(dims: int | Sequence[int] | None, ndim: int) -> list[int]:
    """Sorted, non-negative reduction dims; None or ``[]`` means every dim."""
    if dims is None:
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    if len(dims) == 0 or ndim == 0:
        return list(range(ndim))
    return sorted({canonical_dim(d, ndim) for d in dims})


def exact_copy(builder: GraphBuilder, x: Node, name: str) -> Node:
    """A new tensor holding ``x``'s values: ``prims.mul(x, 1)``, exact for every number
    (-0.0, NaN and inf included), or ``prims.bitwise_or(x, False)`` for bool (the code
    generators make no bool arithmetic, and an ATen call would choose its own layout).
    Its layout is a storage choice (``decomp.layouts``)."""
    if x.tensor_meta.dtype is torch.bool:
        return builder.call(prim("bitwise_or"), x, False, name=name)
    return builder.call(prim("mul"), x, 1, name=name)


class DecompContext:
    """What a rule builds with: the new graph's builder plus helpers.

    ``node`` is the ATen node being decomposed (its ``meta`` is eager's answer and
    may be consulted for output dtypes/devices). Prims made here are named after it
    (``%gelu_erf``), so a decomposed listing still reads like its source.
    """

    def __init__(self, builder: GraphBuilder, node: Node, input_aliases: set[Node]) -> None:
        self.builder = builder
        self.node = node
        self._input_aliases = input_aliases

    # ---------------------------------------------------------------- building

    @property
    def out_meta(self) -> TensorMeta:
        """The ATen node's (single-tensor) metadata."""
        return self.node.tensor_meta

    @property
    def out_metas(self) -> tuple[TensorMeta, ...]:
        """The ATen node's metadata as a tuple (one entry per output; None for absent ones)."""
        meta = self.node.meta
        return meta if isinstance(meta, tuple) else (meta,)  # type: ignore[return-value]

    def aten(self, name: str, *args: Any, **kwargs: Any) -> Node:
        """Append an ATen call (kept extern inside the prims graph), e.g. a seed draw."""
        return self.builder.call(aten(name), *args, name=f"{self.node.name}_seed", **kwargs)

    def iota(
        self, length: int, dtype: torch.dtype = torch.int64, start: int = 0, step: int = 1
    ) -> Node:
        """``start + step * arange(length)`` on the node's device."""
        device = self.out_metas[0].device if self.out_metas[0] is not None else None
        return self.prim("iota", length, start, step, dtype, device or torch.device("cpu"))

    def prim(self, name: str, *args: Any) -> Node:
        """Append ``prims.<name>(*args)`` (metadata from the prim's meta function)."""
        op: OpRef = prim(name)
        short = _SHORT_NAMES.get(name, name)
        result = self.builder.call(op, *args, name=f"{self.node.name}_{short}")
        first = args[0] if args else None
        if get_prim(name).family is PrimFamily.VIEW and first in self._input_aliases:
            self._input_aliases.add(result)
        return result

    def copy(self, x: Node) -> Node:
        """A new tensor holding ``x``'s values (see :func:`exact_copy`)."""
        return exact_copy(self.builder, x, f"{self.node.name}_copy")

    def aliases_input(self, x: Node) -> bool:
        """True if ``x`` is a graph input or a view of one (a copy must not be dropped)."""
        return x in self._input_aliases

    # -------------------------------------------------------------------- dtypes

    def cast(self, x: Any, dtype: torch.dtype) -> Any:
        """``x`` converted to ``dtype`` (numbers and same-dtype tensors pass through)."""
        if not isinstance(x, Node) or x.tensor_meta.dtype == dtype:
            return x
        return self.prim("convert_element_type", x, dtype)

    def promote(
        self, *args: Any, kind: Promotion = Promotion.DEFAULT, opmath: bool = True
    ) -> tuple[torch.dtype, list[Any]]:
        """PyTorch type promotion: ``(result dtype, operands cast to the compute dtype)``.

        Tensors are first cast to the common dtype (as eager does), then, with
        ``opmath``, float16/bfloat16 go to float32 so a compound rule rounds once
        when the caller casts its answer back to the result dtype.
        """
        common, result = promoted_dtypes(*args, kind=kind)
        compute = computation_dtype(common) if opmath else common
        return result, [self.cast(self.cast(a, common), compute) for a in args]

    # ----------------------------------------------------------------- shapes

    def broadcast_to(self, x: Any, shape: Sequence[int]) -> Any:
        """``x`` broadcast to ``shape`` with ``prims.broadcast_in_dim`` (numbers pass)."""
        if not isinstance(x, Node):
            return x
        shape = tuple(shape)
        meta = x.tensor_meta
        # ranks first: a tuple compares items before lengths, and ``(16,) == (s0, 16)``
        # would decide ``Eq(s0, 16)`` where the hint is 16 (decision 0436)
        if meta.ndim == len(shape) and meta.shape == shape:
            return x
        lead = len(shape) - meta.ndim
        if lead < 0:
            raise NotDecomposable(f"cannot broadcast {meta.shape} to {shape}")
        return self.prim("broadcast_in_dim", x, list(shape), list(range(lead, len(shape))))

    def broadcast(self, *args: Any) -> list[Any]:
        """Tensors among ``args`` broadcast to their common shape; numbers unchanged."""
        shapes = [a.tensor_meta.shape for a in args if isinstance(a, Node)]
        shape = broadcast_shapes(*shapes)
        return [self.broadcast_to(a, shape) for a in args]

    def keepdim(self, x: Node, dims: Sequence[int], shape: Sequence[int]) -> Node:
        """Re-insert reduced ``dims`` of ``shape`` as size-1 dims into the reduction ``x``."""
        if not dims:
            return x
        kept = [d for d in range(len(shape)) if d not in dims]
        out_shape = [1 if d in dims else size for d, size in enumerate(shape)]
        return self.prim("broadcast_in_dim", x, out_shape, kept)

    def broadcast_reduced(self, x: Node, dims: Sequence[int], shape: Sequence[int]) -> Node:
        """The reduction ``x`` (over ``dims`` of ``shape``) broadcast back to ``shape``."""
        kept = [d for d in range(len(shape)) if d not in dims]
        return self.prim("broadcast_in_dim", x, list(shape), kept) if dims else x

    def reshape(self, x: Node, shape: Sequence[int]) -> Node:
        """``prims.reshape`` unless ``x`` already has ``shape``."""
        if x.tensor_meta.shape == tuple(shape):
            return x
        return self.prim("reshape", x, list(shape))

    def full(
        self,
        shape: Sequence[int],
        value: Scalar,
        dtype: torch.dtype,
        device: torch.device | None = None,
    ) -> Node:
        """A new tensor filled with ``value``."""
        if device is None:
            first = self.out_metas[0]
            device = first.device if first is not None else torch.device("cpu")
        return self.prim("full", list(shape), value, dtype, device)

    def as_tensor(self, x: Any, dtype: torch.dtype) -> Node:
        """``x`` itself if a tensor, else a 0-dim ``dtype`` tensor holding the number."""
        return x if isinstance(x, Node) else self.full([], x, dtype)

    def where(self, pred: Node, a: Any, b: Any) -> Node:
        """``prims.where`` with number operands materialised as ``prims.full``.

        (Core's reference ``prims.where`` gives a scalar operand the *predicate's* dtype,
        bool, so ``where(m, -inf, x)`` would read ``1.0``; a full tensor sidesteps it.)
        """
        like = a if isinstance(a, Node) else b
        if not isinstance(like, Node):
            raise NotDecomposable("where needs a tensor value operand")
        shape, dtype = pred.tensor_meta.shape, like.tensor_meta.dtype
        a, b = (v if isinstance(v, Node) else self.full(shape, v, dtype) for v in (a, b))
        return self.prim("where", pred, a, b)

    @staticmethod
    def numel(shape: Sequence[int], dims: Sequence[int]) -> int:
        """How many elements a reduction over ``dims`` of ``shape`` combines."""
        return math.prod(shape[d] for d in dims)

    @staticmethod
    def count(value: Any) -> Any:
        """A count of elements as the float scalar a prim takes (``float(value)``); a
        symbolic count stays symbolic (``torch.sym_float``), where ``float()`` would
        specialise the graph to one size (decision 0280)."""
        if isinstance(value, torch.SymInt):
            return torch.sym_float(value)
        return float(value)
