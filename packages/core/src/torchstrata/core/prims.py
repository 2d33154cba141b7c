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
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from torchstrata.core import prims_indexing as _ix
from torchstrata.core.dtypes import wrapped_integer
from torchstrata.core.meta import TensorMeta, contiguous_strides
from torchstrata.core.prim_metas import (
    as_strided_meta,
    broadcast_in_dim,
    broadcast_in_dim_meta,
    convert_meta,
    elementwise_meta,
    full_meta,
    iota_meta,
    permute_meta,
    real_only,
    reduction_meta,
    reshape_meta,
    slice_meta,
    slice_prim,
    where_meta,
)

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
    _PRIMS[name] = PrimDef(name, family, f"{name}{schema}", real_only(name, meta), impl, doc)


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
        elementwise_meta(_name, _rule),
        _elementwise_impl(_fn),
        _doc,
    )
for _name, _rule, _fn, _doc in _BINARY:
    _define(
        _name,
        PrimFamily.BINARY,
        "(a: Tensor|Scalar, b: Tensor|Scalar) -> Tensor",
        elementwise_meta(_name, _rule),
        _elementwise_impl(_fn),
        _doc,
    )
for _name, _fn, _doc in _COMPARISON:
    _define(
        _name,
        PrimFamily.COMPARISON,
        "(a: Tensor|Scalar, b: Tensor|Scalar) -> Tensor[bool]",
        elementwise_meta(_name, "bool"),
        _elementwise_impl(_fn),
        _doc,
    )
for _name, _fn, _doc in _REDUCTIONS:
    _define(
        _name,
        PrimFamily.REDUCTION,
        "(a: Tensor, dims: int[]) -> Tensor",
        reduction_meta(_name),
        _reduce_impl(_fn),
        _doc,
    )

_define(
    "where",
    PrimFamily.TERNARY,
    "(pred: Tensor[bool], a: Tensor|Scalar, b: Tensor|Scalar) -> Tensor",
    where_meta,
    _elementwise_impl(torch.where, first_value=1),
    "a where pred else b",
)
_define(
    "convert_element_type",
    PrimFamily.CAST,
    "(a: Tensor, dtype: dtype) -> Tensor",
    convert_meta,
    lambda a, dtype: a.to(dtype),
    "cast to dtype (float->int truncates, like torch)",
)
_define(
    "broadcast_in_dim",
    PrimFamily.VIEW,
    "(a: Tensor, shape: int[], broadcast_dims: int[]) -> Tensor",
    broadcast_in_dim_meta,
    broadcast_in_dim,
    "view of a with shape; input dim i maps to output dim broadcast_dims[i]; size-1 dims expand",
)
_define(
    "reshape",
    PrimFamily.VIEW,
    "(a: Tensor, shape: int[]) -> Tensor",
    reshape_meta,
    lambda a, shape: a.reshape(tuple(shape)),
    "the elements of a in row-major order, in a new shape",
)
_define(
    "permute",
    PrimFamily.VIEW,
    "(a: Tensor, dims: int[]) -> Tensor",
    permute_meta,
    lambda a, dims: a.permute(tuple(dims)),
    "output dim i is input dim dims[i]",
)
_define(
    "slice",
    PrimFamily.VIEW,
    "(a: Tensor, starts: int[], limits: int[], steps: int[]) -> Tensor",
    slice_meta,
    slice_prim,
    "a[starts:limits:steps] per dim (steps >= 1)",
)
_define(
    "as_strided",
    PrimFamily.VIEW,
    "(a: Tensor, shape: int[], strides: int[], offset: int) -> Tensor",
    as_strided_meta,
    lambda a, shape, strides, offset: torch.as_strided(a, tuple(shape), tuple(strides), offset),
    "raw view of a's storage (a must be contiguous)",
)
_define(
    "full",
    PrimFamily.CREATION,
    "(shape: int[], value: Scalar, dtype: dtype, device: Device) -> Tensor",
    full_meta,
    lambda shape, value, dtype, device: torch.full(tuple(shape), value, dtype=dtype, device=device),
    "a new tensor filled with value",
)
_define(
    "iota",
    PrimFamily.CREATION,
    "(length: int, start: int, step: int, dtype: dtype, device: Device) -> Tensor",
    iota_meta,
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
