"""Tensor metadata: what the compiler knows about a value without its data."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from torchstrata.core.symbolic import size_or_int


def contiguous_strides(
    shape: Sequence[Any], at_least_one: Callable[[Any], Any] | None = None
) -> tuple[Any, ...]:
    """Row-major strides of ``shape`` (size-0 and size-1 dims get the usual torch strides).
    ``at_least_one(size)`` is ``max(size, 1)`` for a size that is not an int (default: a
    ``SymInt``'s ``sym_max``; sympy sizes pass ``sympy.Max``)."""
    strides: list[Any] = []
    running: Any = 1
    for size in reversed(shape):
        strides.append(running)
        if type(size) is int:
            running *= max(size, 1)
        elif at_least_one is not None:
            running = running * at_least_one(size)
        else:  # sym_max: max() of a data-dependent size would guard on it (and cannot)
            running *= torch.sym_max(size, 1) if isinstance(size, torch.SymInt) else max(size, 1)
    return tuple(reversed(strides))


def is_dense(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether ``strides`` lay ``shape`` out densely: every element at its own offset,
    no gaps (a permutation of row-major; size-one dimensions' strides do not count)."""
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(shape, strides, strict=True) if sz > 1):
        if stride != expected:
            return False
        expected *= size
    return True


def same_layout(shape: Sequence[int], strides: Sequence[int], other: Sequence[int]) -> bool:
    """Whether two stridings of ``shape`` place every element at the same offset (size-one
    dimensions' strides do not count; any two layouts of at most one element agree)."""
    if math.prod(shape) <= 1:
        return True
    # one stride expression on both sides agrees at every size: no size is compared (a
    # slice ``x[:, :t // 2]`` would otherwise decide ``t // 2 > 1``, decision 0480)
    return all(
        _one_expression(a, b) or not size > 1 or a == b
        for size, a, b in zip(shape, strides, other, strict=True)
    )


def _one_expression(a: Any, b: Any) -> bool:
    """Whether two strides are one value at every size, deciding nothing: equal ints, or
    symbolic sizes (``SymInt``, a lowering's sizes) of one expression."""
    if type(a) is int and type(b) is int:
        return a == b
    if isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt):
        return bool(a.node.expr == b.node.expr)
    if getattr(a, "is_size_value", False) and getattr(b, "is_size_value", False):
        return bool(a.guards is b.guards and a.expr == b.expr)
    return False


def broadcast_strides(
    shape: Sequence[int],
    strides: Sequence[int],
    out_shape: Sequence[int],
    broadcast_dims: Sequence[int],
) -> tuple[int, ...]:
    """The strides of ``prims.broadcast_in_dim`` of a ``shape``/``strides`` tensor: those
    of ``unsqueeze`` at each new dimension, then ``expand`` (stride 0 where a size-one
    dimension grows).

    A size-one dimension's stride never moves an index, but ATen kernels and users read
    layouts from strides: CUDA's ``avg_pool2d_backward`` returned wrong values on
    operands whose new size-one dimensions had stride 0, and ``x.sum(1, keepdim=True)``
    should come back with eager's strides."""
    sizes, running = list(shape), list(strides)
    kept = set(broadcast_dims)
    for dim in range(len(out_shape)):
        if dim not in kept:  # torch's unsqueeze: the stride the dimension it displaces spans
            running.insert(dim, sizes[dim] * running[dim] if dim < len(sizes) else 1)
            sizes.insert(dim, 1)
    return tuple(
        0 if size != target else stride
        for size, target, stride in zip(sizes, out_shape, running, strict=True)
    )


def _as_int_tuple(values: Sequence[int]) -> tuple[int, ...]:
    # A symbolic size (torch.SymInt, see core.symbolic) stays symbolic; int() would
    # specialise it. Plain ints (most sizes) are kept without a call each.
    if type(values) is tuple and all(type(v) is int for v in values):
        return values
    return tuple(size_or_int(v) for v in values)


def _as_device(value: torch.device | str) -> torch.device:
    device = torch.device(value)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)
    return device


@attrs.frozen
class TensorMeta:
    """Shape, strides, dtype, device and ``requires_grad`` of one tensor value.

    Sizes and strides are ints, or ``torch.SymInt`` symbolic sizes while a compile
    makes dimensions dynamic (:mod:`torchstrata.core.symbolic`, decision 0200).
    """

    shape: tuple[int, ...] = attrs.field(converter=_as_int_tuple)
    dtype: torch.dtype
    device: torch.device = attrs.field(default=torch.device("cpu"), converter=_as_device)
    strides: tuple[int, ...] = attrs.field(
        default=None, converter=attrs.converters.optional(_as_int_tuple)
    )
    requires_grad: bool = False

    def __attrs_post_init__(self) -> None:
        if self.strides is None:
            object.__setattr__(self, "strides", contiguous_strides(self.shape))
        if len(self.strides) != len(self.shape):
            raise ValueError(f"strides {self.strides} do not match the rank of shape {self.shape}")
        if any(size < 0 for size in self.shape):
            raise ValueError(f"negative size in shape {self.shape}")

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor) -> TensorMeta:
        """Describe a real, fake or meta tensor."""
        return cls(
            shape=tuple(tensor.shape),
            dtype=tensor.dtype,
            device=tensor.device,
            strides=tuple(tensor.stride()),
            requires_grad=tensor.requires_grad,
        )

    @property
    def ndim(self) -> int:
        """Rank of the tensor."""
        return len(self.shape)

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the logical elements (not of the underlying storage)."""
        return self.numel * self.dtype.itemsize

    def is_contiguous(self) -> bool:
        """True when the strides are row-major (ignoring dims of size 1 like torch does)."""
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides), strict=True):
            if size == 1:
                continue
            if stride != expected:
                return False
            expected *= size
        return True

    def with_device(self, device: torch.device | str) -> TensorMeta:
        """The same metadata on another device."""
        return attrs.evolve(self, device=device)

    def to_meta_tensor(self) -> torch.Tensor:
        """An empty ``meta``-device tensor with these sizes, strides and dtype."""
        return torch.empty_strided(self.shape, self.strides, dtype=self.dtype, device="meta")

    def to_empty(self) -> torch.Tensor:
        """An uninitialised real tensor with these sizes, strides, dtype and device."""
        return torch.empty_strided(self.shape, self.strides, dtype=self.dtype, device=self.device)


@attrs.frozen
class TensorTraits:
    """What a tensor guard of a symbolic entry checks besides the exact type: the dtype,
    the device and ``requires_grad`` (and no lazy conjugate or negative bit). Its sizes
    and strides are the entry's size check's (:class:`~torchstrata.core.SizeCheck`)."""

    dtype: torch.dtype
    device: torch.device = attrs.field(converter=_as_device)
    requires_grad: bool = False

    @classmethod
    def of(cls, meta: TensorMeta) -> TensorTraits:
        """The traits of ``meta`` (its sizes and strides left out)."""
        return cls(meta.dtype, meta.device, bool(meta.requires_grad))

    def mismatch(self, name: str, tensor: torch.Tensor) -> str:
        """What of ``tensor`` (called ``name``) differs from these traits, e.g.
        ``L['x'].dtype is torch.float16, expected torch.float32``; '' when nothing does.
        Its type is the caller's to check."""
        for what, got, want in (
            ("dtype", tensor.dtype, self.dtype),
            ("device", tensor.device, self.device),
            ("requires_grad", tensor.requires_grad, self.requires_grad),
            ("is_neg()", tensor.is_neg(), False),  # kernels read lazy bits raw
            ("is_conj()", tensor.is_conj(), False),
        ):
            if got != want:
                return f"{name}.{what} is {got}, expected {want}"
        return ""

    def __str__(self) -> str:
        grad = ", requires_grad" if self.requires_grad else ""
        return f"{self.dtype} on {self.device}{grad}, any sizes"
