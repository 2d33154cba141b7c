"""Meta functions and reference implementations of the prims added in version 1.1.

Indexing (``gather``, ``scatter``, ``scatter_add``, ``cat``), scans (``cumsum``),
arg-reductions (``argmax``, ``argmin``) and the counter-based random prim ``rand``.
:mod:`torchstrata.core.prims` registers them; see its table for schemas.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from torchstrata.core.meta import TensorMeta
from torchstrata.core.prim_errors import PrimError

_MASK32 = 0xFFFFFFFF

#: Random bits ``rand`` uses per dtype: one per bit of the significand, so every value
#: ``k * 2**-bits`` is exact and the result lies in ``[0, 1)``.
RAND_BITS = {torch.float16: 11, torch.bfloat16: 8}
RAND_DEFAULT_BITS = 24


def _dim(name: str, a: TensorMeta, dim: int) -> int:
    if not 0 <= dim < max(a.ndim, 1):
        raise PrimError(
            f"prims.{name}: dim {dim} invalid for rank {a.ndim} (use a non-negative dim)"
        )
    return dim


def _index_tensor(name: str, a: TensorMeta, index: Any) -> TensorMeta:
    if not isinstance(index, TensorMeta) or index.dtype is not torch.int64:
        raise PrimError(f"prims.{name}: index must be an int64 tensor")
    if index.ndim != a.ndim or index.device != a.device:
        raise PrimError(f"prims.{name}: index rank/device must match the input's")
    return index


def gather_meta(a: TensorMeta, dim: int, index: TensorMeta) -> TensorMeta:
    """Shape of ``index``, dtype of ``a``."""
    _dim("gather", a, dim)
    index = _index_tensor("gather", a, index)
    return TensorMeta(index.shape, a.dtype, a.device)


def gather(a: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    """``out[i][j] = a[index[i][j]][j]`` for ``dim=0`` (and so on)."""
    return torch.gather(a, dim, index)


def _scatter_meta(name: str) -> Any:
    def meta(a: TensorMeta, dim: int, index: TensorMeta, src: TensorMeta) -> TensorMeta:
        _dim(name, a, dim)
        index = _index_tensor(name, a, index)
        if not isinstance(src, TensorMeta) or src.shape != index.shape or src.dtype != a.dtype:
            raise PrimError(f"prims.{name}: src must be a tensor of index's shape and a's dtype")
        for d, (i, s) in enumerate(zip(index.shape, a.shape, strict=True)):
            if d != dim and i > s:
                raise PrimError(f"prims.{name}: index size {i} exceeds input size {s} in dim {d}")
        return TensorMeta(a.shape, a.dtype, a.device)

    return meta


scatter_meta = _scatter_meta("scatter")
scatter_add_meta = _scatter_meta("scatter_add")


def scatter(a: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """A copy of ``a`` with ``src`` written at ``index`` along ``dim``."""
    return torch.scatter(a, dim, index, src)


def scatter_add(a: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """A copy of ``a`` with ``src`` added at ``index`` along ``dim``."""
    return torch.scatter_add(a, dim, index, src)


def cat_meta(tensors: Sequence[TensorMeta], dim: int) -> TensorMeta:
    """Inputs of one dtype, device and rank, equal except along ``dim``."""
    tensors = list(tensors)
    if not tensors or not all(isinstance(t, TensorMeta) for t in tensors):
        raise PrimError("prims.cat needs a non-empty list of tensors")
    first = tensors[0]
    _dim("cat", first, dim)
    if first.ndim == 0:
        raise PrimError("prims.cat: 0-dim tensors cannot be concatenated")
    for other in tensors[1:]:
        if other.dtype != first.dtype or other.device != first.device or other.ndim != first.ndim:
            raise PrimError("prims.cat: tensors differ in dtype, device or rank")
        if any(
            s != o
            for d, (s, o) in enumerate(zip(first.shape, other.shape, strict=True))
            if d != dim
        ):
            raise PrimError(
                f"prims.cat: shapes {first.shape} and {other.shape} differ outside dim {dim}"
            )
    shape = list(first.shape)
    shape[dim] = sum(t.shape[dim] for t in tensors)
    return TensorMeta(tuple(shape), first.dtype, first.device)


def cat(tensors: Sequence[torch.Tensor], dim: int) -> torch.Tensor:
    """The tensors concatenated along ``dim``."""
    return torch.cat(list(tensors), dim)


def cumsum_meta(a: TensorMeta, dim: int) -> TensorMeta:
    """Same shape and dtype (no bool: cast first)."""
    _dim("cumsum", a, dim)
    if a.dtype is torch.bool:
        raise PrimError("prims.cumsum does not scan bool tensors; cast first")
    return TensorMeta(a.shape, a.dtype, a.device)


def cumsum(a: torch.Tensor, dim: int) -> torch.Tensor:
    """Inclusive prefix sum along ``dim``, accumulated in the input dtype."""
    return torch.cumsum(a, dim, dtype=a.dtype)


def _arg_meta(name: str) -> Any:
    def meta(a: TensorMeta, dim: int) -> TensorMeta:
        _dim(name, a, dim)
        if a.dtype is torch.bool:
            raise PrimError(f"prims.{name} does not reduce bool tensors; cast first")
        if a.ndim and a.shape[dim] == 0:
            raise PrimError(f"prims.{name}: cannot reduce an empty dim")
        shape = tuple(s for d, s in enumerate(a.shape) if d != dim)
        return TensorMeta(shape, torch.int64, a.device)

    return meta


argmax_meta = _arg_meta("argmax")
argmin_meta = _arg_meta("argmin")


def argmax(a: torch.Tensor, dim: int) -> torch.Tensor:
    """Index of the first maximum along ``dim`` (NaN counts as the maximum)."""
    return torch.argmax(a, dim) if a.ndim else torch.zeros((), dtype=torch.int64, device=a.device)


def argmin(a: torch.Tensor, dim: int) -> torch.Tensor:
    """Index of the first minimum along ``dim`` (NaN counts as the minimum)."""
    return torch.argmin(a, dim) if a.ndim else torch.zeros((), dtype=torch.int64, device=a.device)


def rand_meta(
    shape: Sequence[int], seed: Any, offset: int, dtype: torch.dtype, device: torch.device
) -> TensorMeta:
    """A float tensor of ``shape``; ``seed`` is an int or a 0-dim int64 tensor."""
    if isinstance(seed, TensorMeta) and (seed.ndim or seed.dtype is not torch.int64):
        raise PrimError("prims.rand: a tensor seed must be a 0-dim int64 tensor")
    if not dtype.is_floating_point or offset < 0:
        raise PrimError("prims.rand takes a floating dtype and a non-negative offset")
    return TensorMeta(tuple(shape), dtype, device)


def mix32(x: torch.Tensor) -> torch.Tensor:
    """Chris Wellons' ``lowbias32`` integer hash on the low 32 bits of int64 ``x``."""
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def rand(
    shape: Sequence[int], seed: Any, offset: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """Uniform ``[0, 1)`` numbers, a pure function of ``(seed, offset + linear index)``.

    With ``c = offset + i`` for the row-major index ``i``:
    ``h = mix32(mix32(seed) ^ (c & 0xFFFFFFFF) ^ mix32((c >> 32) + 0x9E3779B9))`` and the
    value is ``(h >> (32 - bits)) * 2**-bits`` with ``bits`` = 11 (float16), 8 (bfloat16),
    24 otherwise. Integer ops only, so every backend reproduces it bit for bit.
    """
    seed_t = torch.as_tensor(seed, dtype=torch.int64, device=device)
    count = 1
    for size in shape:
        count *= size
    c = torch.arange(count, dtype=torch.int64, device=device) + offset
    h = mix32(mix32(seed_t) ^ (c & _MASK32) ^ mix32((c >> 32) + 0x9E3779B9))
    bits = RAND_BITS.get(dtype, RAND_DEFAULT_BITS)
    values = (h >> (32 - bits)).to(torch.float32) * (2.0**-bits)
    return values.to(dtype).reshape(tuple(shape))
