"""The primitive ops: the closed vocabulary every codegen backend must implement.

Each prim has a schema, a meta function (``TensorMeta`` in, ``TensorMeta`` out) and a
reference implementation in eager torch. Prims are strict so that backends stay simple:

* elementwise prims take tensors of one shape, dtype and device (no implicit broadcast
  or type promotion; the decomposition inserts ``broadcast_in_dim`` and
  ``convert_element_type``); a Python scalar may stand in for a tensor operand and
  takes the tensor operand's dtype;
* reductions drop the reduced dims and keep the input dtype;
* views produce a new logical layout of their input (backends turn them into index
  arithmetic; the reference implementation returns torch views);
* prims are real-valued: every meta function refuses a complex tensor, dtype or number
  (no backend computes complex arithmetic; the decomposition keeps ATen calls that
  touch complex values, see ``docs/decisions/0070-complex-stays-aten.md``).

The table is versioned (:data:`PRIMS_VERSION`): adding a prim bumps the minor part,
changing one's semantics bumps the major part. 1.2 states that prims are real-valued
(complex operands were never computed right; now they are refused).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from torchstrata.core import prims_indexing as _ix
from torchstrata.core.dtypes import wrapped_integer
from torchstrata.core.meta import TensorMeta, broadcast_strides, contiguous_strides
from torchstrata.core.prim_errors import PrimError

PRIMS_VERSION = (1, 2)


class PrimFamily(enum.Enum):
    """The families that backends implement together."""

    UNARY = "unary"
    BINARY = "binary"
    TERNARY = "ternary"
    COMPARISON = "comparison"
    CAST = "cast"
    VIEW = "view"
    REDUCTION = "reduction"
    CREATION = "creation"
    INDEXING = "indexing"
    SCAN = "scan"
    RANDOM = "random"


ELEMENTWISE_FAMILIES = frozenset(
    {
        PrimFamily.UNARY,
        PrimFamily.BINARY,
        PrimFamily.TERNARY,
        PrimFamily.COMPARISON,
        PrimFamily.CAST,
    }
)


@attrs.frozen
class PrimDef:
    """One primitive: its name, family, schema, meta function and reference implementation."""

    name: str
    family: PrimFamily
    schema: str
    meta: Callable[..., TensorMeta]
    impl: Callable[..., torch.Tensor]
    doc: str

    @property
    def is_elementwise(self) -> bool:
        """True for prims computed independently per element."""
        return self.family in ELEMENTWISE_FAMILIES

    @property
    def any_dense_layout(self) -> bool:
        """True when a result may be stored in any dense layout: every prim but a view
        makes a fresh tensor whose elements are defined at their logical indices, so its
        layout is a storage choice (see ``GraphBuilder.relayout``); a view's strides
        follow from its operand's."""
        return self.family is not PrimFamily.VIEW


_PRIMS: dict[str, PrimDef] = {}


def get_prim(name: str) -> PrimDef:
    """Look up a prim by ``add`` or ``prims.add``."""
    key = name.removeprefix("prims.")
    try:
        return _PRIMS[key]
    except KeyError:
        raise LookupError(f"no prim named {key!r}") from None


def all_prims() -> tuple[PrimDef, ...]:
    """Every prim, in definition order."""
    return tuple(_PRIMS.values())


def _define(
    name: str,
    family: PrimFamily,
    schema: str,
    meta: Callable[..., TensorMeta],
    impl: Callable[..., torch.Tensor],
    doc: str,
) -> None:
    if name in _PRIMS:
        raise ValueError(f"prim {name} defined twice")
    _PRIMS[name] = PrimDef(name, family, f"{name}{schema}", _real_only(name, meta), impl, doc)


# ---------------------------------------------------------------------------- meta rules


def _complex_value(value: Any) -> str | None:
    """A description of the first complex tensor, dtype or number in ``value``, if any."""
    if isinstance(value, TensorMeta):
        return f"a {value.dtype} tensor" if value.dtype.is_complex else None
    if isinstance(value, torch.dtype):
        return f"dtype {value}" if value.is_complex else None
    if isinstance(value, complex):
        return f"the complex number {value!r}"
    if isinstance(value, list | tuple):
        for item in value:
            found = _complex_value(item)
            if found is not None:
                return found
    return None


def _real_only(name: str, meta: Callable[..., TensorMeta]) -> Callable[..., TensorMeta]:
    """``meta`` refusing complex operands, dtypes and numbers: prims are real-valued (no
    backend computes complex arithmetic), so complex values stay ATen calls."""

    def checked(*args: Any, **kwargs: Any) -> TensorMeta:
        found = _complex_value(args) or _complex_value(tuple(kwargs.values()))
        if found is not None:
            raise PrimError(
                f"prims.{name} takes real values, got {found}: prims are real-valued, "
                "complex values stay ATen calls (docs/decisions/0070-complex-stays-aten.md)"
            )
        return meta(*args, **kwargs)

    checked.__doc__ = meta.__doc__
    return checked


Operand = TensorMeta | int | float | bool


def _tensor_operands(name: str, operands: Sequence[Any]) -> list[TensorMeta]:
    tensors = [op for op in operands if isinstance(op, TensorMeta)]
    if not tensors:
        raise PrimError(f"prims.{name} needs at least one tensor operand")
    first = tensors[0]
    for other in tensors[1:]:
        if other.shape != first.shape:
            raise PrimError(
                f"prims.{name}: shapes {first.shape} and {other.shape} differ "
                "(broadcast explicitly with prims.broadcast_in_dim)"
            )
        if other.dtype != first.dtype:
            raise PrimError(
                f"prims.{name}: dtypes {first.dtype} and {other.dtype} differ "
                "(cast explicitly with prims.convert_element_type)"
            )
        if other.device != first.device:
            raise PrimError(f"prims.{name}: devices {first.device} and {other.device} differ")
    for op in operands:
        if not isinstance(op, TensorMeta | int | float | bool):
            raise PrimError(f"prims.{name}: operand {op!r} is neither a tensor nor a number")
    return tensors


def _elementwise_meta(name: str, dtype_rule: str) -> Callable[..., TensorMeta]:
    def meta(*operands: Any) -> TensorMeta:
        first = _tensor_operands(name, operands)[0]
        if dtype_rule == "float" and not first.dtype.is_floating_point:
            raise PrimError(f"prims.{name} takes floating-point tensors, got {first.dtype}")
        if dtype_rule == "int" and (first.dtype.is_floating_point or first.dtype.is_complex):
            raise PrimError(f"prims.{name} takes integer or bool tensors, got {first.dtype}")
        dtype = torch.bool if dtype_rule == "bool" else first.dtype
        return TensorMeta(first.shape, dtype, first.device)

    return meta


def _where_meta(pred: Any, a: Any, b: Any) -> TensorMeta:
    if not isinstance(pred, TensorMeta) or pred.dtype is not torch.bool:
        raise PrimError("prims.where needs a bool tensor predicate")
    values = (
        _tensor_operands("where", [a, b])
        if isinstance(a, TensorMeta) or isinstance(b, TensorMeta)
        else []
    )
    if values and values[0].shape != pred.shape:
        raise PrimError(f"prims.where: predicate shape {pred.shape} differs from {values[0].shape}")
    if not values:
        raise PrimError("prims.where needs at least one tensor value operand")
    return TensorMeta(pred.shape, values[0].dtype, pred.device)


def _convert_meta(a: TensorMeta, dtype: torch.dtype) -> TensorMeta:
    if not isinstance(dtype, torch.dtype):
        raise PrimError(f"prims.convert_element_type: {dtype!r} is not a dtype")
    return TensorMeta(a.shape, dtype, a.device)


def _check_dims(name: str, a: TensorMeta, dims: Sequence[int]) -> tuple[int, ...]:
    dims = tuple(dims)
    if any(not 0 <= d < a.ndim for d in dims) or len(set(dims)) != len(dims):
        raise PrimError(
            f"prims.{name}: dims {dims} invalid for rank {a.ndim} (use non-negative, distinct dims)"
        )
    return dims


def _reduction_meta(name: str) -> Callable[..., TensorMeta]:
    def meta(a: TensorMeta, dims: Sequence[int]) -> TensorMeta:
        reduced = set(_check_dims(name, a, dims))
        if a.dtype is torch.bool:
            raise PrimError(f"prims.{name} does not reduce bool tensors; cast first")
        shape = tuple(s for i, s in enumerate(a.shape) if i not in reduced)
        return TensorMeta(shape, a.dtype, a.device)

    return meta


def _broadcast_in_dim_meta(
    a: TensorMeta, shape: Sequence[int], broadcast_dims: Sequence[int]
) -> TensorMeta:
    shape, broadcast_dims = tuple(shape), tuple(broadcast_dims)
    if len(broadcast_dims) != a.ndim:
        raise PrimError(
            f"prims.broadcast_in_dim: {len(broadcast_dims)} broadcast dims for rank {a.ndim}"
        )
    if list(broadcast_dims) != sorted(set(broadcast_dims)) or any(
        not 0 <= d < len(shape) for d in broadcast_dims
    ):
        raise PrimError(
            f"prims.broadcast_in_dim: broadcast dims {broadcast_dims} must increase within rank {len(shape)}"
        )
    for in_dim, out_dim in enumerate(broadcast_dims):
        if a.shape[in_dim] not in (1, shape[out_dim]):
            raise PrimError(
                f"prims.broadcast_in_dim: cannot broadcast size {a.shape[in_dim]} to {shape[out_dim]}"
            )
    strides = broadcast_strides(a.shape, a.strides, shape, broadcast_dims)
    return TensorMeta(shape, a.dtype, a.device, strides)


def _broadcast_in_dim(
    a: torch.Tensor, shape: Sequence[int], broadcast_dims: Sequence[int]
) -> torch.Tensor:
    # the new dimensions as ``unsqueeze`` makes them (see meta.broadcast_strides)
    kept = set(broadcast_dims)
    for out_dim in range(len(shape)):
        if out_dim not in kept:
            a = a.unsqueeze(out_dim)
    return a.expand(tuple(shape))


def _reshape_meta(a: TensorMeta, shape: Sequence[int]) -> TensorMeta:
    shape = tuple(shape)
    if math.prod(shape) != a.numel or any(s < 0 for s in shape):
        raise PrimError(f"prims.reshape: cannot reshape {a.shape} ({a.numel} elements) to {shape}")
    return TensorMeta(shape, a.dtype, a.device)


def _permute_meta(a: TensorMeta, dims: Sequence[int]) -> TensorMeta:
    dims = tuple(dims)
    if sorted(dims) != list(range(a.ndim)):
        raise PrimError(f"prims.permute: {dims} is not a permutation of rank {a.ndim}")
    return TensorMeta(
        tuple(a.shape[d] for d in dims), a.dtype, a.device, tuple(a.strides[d] for d in dims)
    )


def _slice_meta(
    a: TensorMeta, starts: Sequence[int], limits: Sequence[int], steps: Sequence[int]
) -> TensorMeta:
    if not len(starts) == len(limits) == len(steps) == a.ndim:
        raise PrimError("prims.slice needs one start, limit and step per dim")
    shape, strides = [], []
    for size, stride, start, limit, step in zip(
        a.shape, a.strides, starts, limits, steps, strict=True
    ):
        if not (0 <= start <= limit <= size) or step < 1:
            raise PrimError(f"prims.slice: [{start}:{limit}:{step}] out of range for size {size}")
        shape.append(max(0, (limit - start + step - 1) // step))
        strides.append(stride * step)
    return TensorMeta(tuple(shape), a.dtype, a.device, tuple(strides))


def _slice(
    a: torch.Tensor, starts: Sequence[int], limits: Sequence[int], steps: Sequence[int]
) -> torch.Tensor:
    index = tuple(slice(s, e, k) for s, e, k in zip(starts, limits, steps, strict=True))
    return a[index]


def _as_strided_meta(
    a: TensorMeta, shape: Sequence[int], strides: Sequence[int], offset: int
) -> TensorMeta:
    if len(shape) != len(strides) or offset < 0:
        raise PrimError("prims.as_strided: shape and strides differ in length, or offset < 0")
    return TensorMeta(tuple(shape), a.dtype, a.device, tuple(strides))


def _full_meta(
    shape: Sequence[int], value: Any, dtype: torch.dtype, device: torch.device
) -> TensorMeta:
    return TensorMeta(tuple(shape), dtype, device)


def _iota_meta(
    length: int, start: int, step: int, dtype: torch.dtype, device: torch.device
) -> TensorMeta:
    if length < 0:
        raise PrimError("prims.iota: negative length")
    return TensorMeta((length,), dtype, device)


# ------------------------------------------------------------------- implementations


def _elementwise_impl(
    fn: Callable[..., torch.Tensor], first_value: int = 0
) -> Callable[..., torch.Tensor]:
    """Wrap a torch function so that scalar operands take the tensor operand's dtype.

    ``first_value`` skips leading operands that do not carry the value dtype (the
    predicate of ``where``).
    """

    def impl(*operands: Any) -> torch.Tensor:
        like = next(op for op in operands[first_value:] if isinstance(op, torch.Tensor))
        tensors = [
            op if isinstance(op, torch.Tensor) else _scalar_tensor(op, like) for op in operands
        ]
        return fn(*tensors)

    return impl


def _scalar_tensor(value: Any, like: torch.Tensor) -> torch.Tensor:
    """``value`` in ``like``'s dtype as eager converts a Scalar: an int wraps into an
    integer dtype (``uint8 % 300`` divides by 44)."""
    dtype = like.dtype
    integer = not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)
    if type(value) is int and integer:
        value = wrapped_integer(value, dtype)
    return torch.tensor(value, dtype=dtype, device=like.device)


def _div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """True division of floats; truncating division of integers. On the CPU, the floor
    quotient moved up by one where the remainder is nonzero and the signs differ: ATen's
    CPU ``div(rounding_mode="trunc")`` of int32/int64 dies of SIGFPE on the smallest value
    by -1, its floor division wraps (a zero divisor raises in both)."""
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return torch.true_divide(a, b)
    if a.device.type != "cpu" or a.dtype == torch.uint8:
        return torch.div(a, b, rounding_mode="trunc")
    floor = torch.div(a, b, rounding_mode="floor")
    inexact = (torch.fmod(a, b) != 0) & ((a < 0) != (b < 0))
    return floor + inexact.to(floor.dtype)


def _reduce_impl(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def impl(a: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
        if not dims:
            return a.clone()
        return fn(a, tuple(dims))

    return impl


def _prod(a: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    result = a
    for d in sorted(dims, reverse=True):
        result = torch.prod(result, d, dtype=a.dtype)
    return result


_UNARY: tuple[tuple[str, str, Callable[..., torch.Tensor], str], ...] = (
    ("abs", "same", torch.abs, "|a|"),
    ("neg", "same", torch.neg, "-a"),
    ("exp", "float", torch.exp, "e**a"),
    ("exp2", "float", torch.exp2, "2**a"),
    ("expm1", "float", torch.expm1, "e**a - 1"),
    ("log", "float", torch.log, "natural logarithm"),
    ("log2", "float", torch.log2, "base-2 logarithm"),
    ("log1p", "float", torch.log1p, "log(1 + a)"),
    ("sqrt", "float", torch.sqrt, "square root"),
    ("rsqrt", "float", torch.rsqrt, "1 / sqrt(a)"),
    ("reciprocal", "float", torch.reciprocal, "1 / a"),
    ("sin", "float", torch.sin, "sine"),
    ("cos", "float", torch.cos, "cosine"),
    ("tan", "float", torch.tan, "tangent"),
    ("tanh", "float", torch.tanh, "hyperbolic tangent"),
    ("asin", "float", torch.asin, "arcsine"),
    ("acos", "float", torch.acos, "arccosine"),
    ("atan", "float", torch.atan, "arctangent"),
    ("sinh", "float", torch.sinh, "hyperbolic sine"),
    ("cosh", "float", torch.cosh, "hyperbolic cosine"),
    ("erf", "float", torch.erf, "error function"),
    ("floor", "same", torch.floor, "round towards -inf"),
    ("ceil", "same", torch.ceil, "round towards +inf"),
    ("round", "same", torch.round, "round half to even"),
    ("trunc", "same", torch.trunc, "round towards zero"),
    ("sign", "same", torch.sign, "-1, 0 or 1 (0 for NaN, as torch.sign)"),
    ("isnan", "bool", torch.isnan, "a != a"),
    ("isinf", "bool", torch.isinf, "a is +inf or -inf"),
    ("bitwise_not", "int", torch.bitwise_not, "~a (logical not for bool)"),
)

_BINARY: tuple[tuple[str, str, Callable[..., torch.Tensor], str], ...] = (
    ("add", "same", torch.add, "a + b"),
    ("sub", "same", torch.sub, "a - b"),
    ("mul", "same", torch.mul, "a * b"),
    ("div", "same", _div, "a / b: true division for floats, truncating for integers"),
    ("remainder", "same", torch.remainder, "Python-style modulus (sign of b)"),
    ("fmod", "same", torch.fmod, "C-style modulus (sign of a)"),
    ("pow", "same", torch.pow, "a ** b"),
    ("maximum", "same", torch.maximum, "elementwise max, NaN-propagating"),
    ("minimum", "same", torch.minimum, "elementwise min, NaN-propagating"),
    ("atan2", "float", torch.atan2, "atan(a / b) with quadrant"),
    ("bitwise_and", "int", torch.bitwise_and, "a & b"),
    ("bitwise_or", "int", torch.bitwise_or, "a | b"),
    ("bitwise_xor", "int", torch.bitwise_xor, "a ^ b"),
)

_COMPARISON: tuple[tuple[str, Callable[..., torch.Tensor], str], ...] = (
    ("eq", torch.eq, "a == b"),
    ("ne", torch.ne, "a != b"),
    ("lt", torch.lt, "a < b"),
    ("le", torch.le, "a <= b"),
    ("gt", torch.gt, "a > b"),
    ("ge", torch.ge, "a >= b"),
)

_REDUCTIONS: tuple[tuple[str, Callable[..., torch.Tensor], str], ...] = (
    (
        "sum",
        lambda a, dims: torch.sum(a, dims, dtype=a.dtype),
        "sum over dims (accumulates in the input dtype)",
    ),
    ("prod", _prod, "product over dims"),
    ("amax", torch.amax, "maximum over dims, NaN-propagating"),
    ("amin", torch.amin, "minimum over dims, NaN-propagating"),
)

for _name, _rule, _fn, _doc in _UNARY:
    _define(
        _name,
        PrimFamily.UNARY,
        "(a: Tensor) -> Tensor",
        _elementwise_meta(_name, _rule),
        _elementwise_impl(_fn),
        _doc,
    )
for _name, _rule, _fn, _doc in _BINARY:
    _define(
        _name,
        PrimFamily.BINARY,
        "(a: Tensor|Scalar, b: Tensor|Scalar) -> Tensor",
        _elementwise_meta(_name, _rule),
        _elementwise_impl(_fn),
        _doc,
    )
for _name, _fn, _doc in _COMPARISON:
    _define(
        _name,
        PrimFamily.COMPARISON,
        "(a: Tensor|Scalar, b: Tensor|Scalar) -> Tensor[bool]",
        _elementwise_meta(_name, "bool"),
        _elementwise_impl(_fn),
        _doc,
    )
for _name, _fn, _doc in _REDUCTIONS:
    _define(
        _name,
        PrimFamily.REDUCTION,
        "(a: Tensor, dims: int[]) -> Tensor",
        _reduction_meta(_name),
        _reduce_impl(_fn),
        _doc,
    )

_define(
    "where",
    PrimFamily.TERNARY,
    "(pred: Tensor[bool], a: Tensor|Scalar, b: Tensor|Scalar) -> Tensor",
    _where_meta,
    _elementwise_impl(torch.where, first_value=1),
    "a where pred else b",
)
_define(
    "convert_element_type",
    PrimFamily.CAST,
    "(a: Tensor, dtype: dtype) -> Tensor",
    _convert_meta,
    lambda a, dtype: a.to(dtype),
    "cast to dtype (float->int truncates, like torch)",
)
_define(
    "broadcast_in_dim",
    PrimFamily.VIEW,
    "(a: Tensor, shape: int[], broadcast_dims: int[]) -> Tensor",
    _broadcast_in_dim_meta,
    _broadcast_in_dim,
    "view of a with shape; input dim i maps to output dim broadcast_dims[i]; size-1 dims expand",
)
_define(
    "reshape",
    PrimFamily.VIEW,
    "(a: Tensor, shape: int[]) -> Tensor",
    _reshape_meta,
    lambda a, shape: a.reshape(tuple(shape)),
    "the elements of a in row-major order, in a new shape",
)
_define(
    "permute",
    PrimFamily.VIEW,
    "(a: Tensor, dims: int[]) -> Tensor",
    _permute_meta,
    lambda a, dims: a.permute(tuple(dims)),
    "output dim i is input dim dims[i]",
)
_define(
    "slice",
    PrimFamily.VIEW,
    "(a: Tensor, starts: int[], limits: int[], steps: int[]) -> Tensor",
    _slice_meta,
    _slice,
    "a[starts:limits:steps] per dim (steps >= 1)",
)
_define(
    "as_strided",
    PrimFamily.VIEW,
    "(a: Tensor, shape: int[], strides: int[], offset: int) -> Tensor",
    _as_strided_meta,
    lambda a, shape, strides, offset: torch.as_strided(a, tuple(shape), tuple(strides), offset),
    "raw view of a's storage (a must be contiguous)",
)
_define(
    "full",
    PrimFamily.CREATION,
    "(shape: int[], value: Scalar, dtype: dtype, device: Device) -> Tensor",
    _full_meta,
    lambda shape, value, dtype, device: torch.full(tuple(shape), value, dtype=dtype, device=device),
    "a new tensor filled with value",
)
_define(
    "iota",
    PrimFamily.CREATION,
    "(length: int, start: int, step: int, dtype: dtype, device: Device) -> Tensor",
    _iota_meta,
    lambda length, start, step, dtype, device: torch.arange(
        start, start + length * step, step, dtype=dtype, device=device
    )[:length],
    "start + step * arange(length)",
)

# Version 1.1: indexing, scans, arg-reductions, counter-based random numbers.
_define(
    "argmax",
    PrimFamily.REDUCTION,
    "(a: Tensor, dim: int) -> Tensor[int64]",
    _ix.argmax_meta,
    _ix.argmax,
    "index of the first maximum along dim (dim dropped; NaN is the maximum)",
)
_define(
    "argmin",
    PrimFamily.REDUCTION,
    "(a: Tensor, dim: int) -> Tensor[int64]",
    _ix.argmin_meta,
    _ix.argmin,
    "index of the first minimum along dim (dim dropped; NaN is the minimum)",
)
_define(
    "cumsum",
    PrimFamily.SCAN,
    "(a: Tensor, dim: int) -> Tensor",
    _ix.cumsum_meta,
    _ix.cumsum,
    "inclusive prefix sum along dim, accumulated in the input dtype",
)
_define(
    "cat",
    PrimFamily.INDEXING,
    "(tensors: Tensor[], dim: int) -> Tensor",
    _ix.cat_meta,
    _ix.cat,
    "tensors of one dtype concatenated along dim",
)
_define(
    "gather",
    PrimFamily.INDEXING,
    "(a: Tensor, dim: int, index: Tensor[int64]) -> Tensor",
    _ix.gather_meta,
    _ix.gather,
    "out[i][j] = a[index[i][j]][j] for dim 0 (index: a's rank, in range); shape of index",
)
_define(
    "scatter",
    PrimFamily.INDEXING,
    "(a: Tensor, dim: int, index: Tensor[int64], src: Tensor) -> Tensor",
    _ix.scatter_meta,
    _ix.scatter,
    "copy of a with out[index[i][j]][j] = src[i][j] (dim 0); duplicate indices: any one wins",
)
_define(
    "scatter_add",
    PrimFamily.INDEXING,
    "(a: Tensor, dim: int, index: Tensor[int64], src: Tensor) -> Tensor",
    _ix.scatter_add_meta,
    _ix.scatter_add,
    "copy of a with src added at index along dim (like scatter, accumulating)",
)
_define(
    "rand",
    PrimFamily.RANDOM,
    "(shape: int[], seed: int|Tensor[int64], offset: int, dtype: dtype, device: Device) -> Tensor",
    _ix.rand_meta,
    _ix.rand,
    "uniform [0, 1): a pure integer hash of (seed, offset + row-major index); see prims_indexing.rand",
)

del _name, _rule, _fn, _doc


def contiguous_like(meta: TensorMeta) -> TensorMeta:
    """``meta`` with row-major strides."""
    return attrs.evolve(meta, strides=contiguous_strides(meta.shape))
