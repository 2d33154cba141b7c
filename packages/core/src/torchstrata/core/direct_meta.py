"""Output metadata of common ops computed directly, without running torch's meta kernels.

On ``meta`` tensors, PyTorch runs Python reference implementations for most ops
(torch's "refs"), and those import sympy on first use: half a second of a cold compile.
:func:`direct_meta` answers the common cases itself (pointwise arithmetic and activations,
layer norm, ``arange(end)``) and returns None for anything else, so callers fall back to
the meta kernel.

It only answers where the answer is unambiguous and equal to the meta kernel's:

* every tensor operand has canonical row-major strides (``contiguous_strides(shape)``), so
  the output is row-major too (torch's stride rule keeps that order for any broadcast);
* every tensor with dims is floating point; 0-dim tensors of a lower or equal category
  (bool, integer, floating) and Python scalars then never change the result dtype, which is
  the promotion of the tensors with dims;
* one device, apart from 0-dim CPU tensors (scalars that may join any device);
* no empty outputs, and only the keyword arguments that the op table names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from torchstrata.core.graph import NodeMeta
from torchstrata.core.meta import TensorMeta, contiguous_strides

#: Pointwise ops that keep the (promoted) floating dtype: name -> allowed keyword arguments.
_UNARY = frozenset(
    {"exp", "log", "tanh", "sigmoid", "relu", "neg", "sin", "cos", "sqrt", "rsqrt", "erf"}
    | {"silu", "log1p", "expm1", "reciprocal", "abs", "square"}
)
#: Binary ops and their ATen overload; ``maximum``/``minimum`` take no Python scalars.
_BINARY = {
    "add": "Tensor",
    "sub": "Tensor",
    "mul": "Tensor",
    "div": "Tensor",
    "maximum": "default",
    "minimum": "default",
}
_TENSORS_ONLY = frozenset({"maximum", "minimum"})
#: The dtypes torch's meta kernels treat uniformly (float8 types have gaps).
_FLOATING = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
_BINARY_OPERATORS = {"add": "add", "sub": "sub", "mul": "mul", "truediv": "div"}
_KEYWORDS: Mapping[str, frozenset[str]] = {
    "add": frozenset({"alpha"}),
    "sub": frozenset({"alpha"}),
    "gelu": frozenset({"approximate"}),
}


def _pointwise_table() -> dict[str, tuple[str, int]]:
    """Op name (torch, Tensor method, operator and ATen spellings) -> (base name, arity)."""
    table: dict[str, tuple[str, int]] = {}
    overloads = dict.fromkeys(_UNARY | {"gelu"}, "default") | _BINARY
    for name, overload in overloads.items():
        entry = (name, 2 if name in _BINARY else 1)
        table[f"torch.{name}"] = entry
        table[f"torch.Tensor.{name}"] = entry
        table[f"aten.{name}.{overload}"] = entry
    for name in ("gelu", "relu", "silu", "sigmoid", "tanh"):
        table[f"torch.nn.functional.{name}"] = (name, 1)
    for operator_name, name in _BINARY_OPERATORS.items():
        table[f"operator.{operator_name}"] = (name, 2)
    table["operator.neg"] = ("neg", 1)
    return table


_POINTWISE = _pointwise_table()
_LAYER_NORM = frozenset({"torch.nn.functional.layer_norm", "aten.native_layer_norm.default"})


def _is_scalar(value: Any) -> bool:
    return isinstance(value, bool | int | float)


def _keywords_allowed(name: str, kwargs: Mapping[str, Any]) -> bool:
    allowed = _KEYWORDS.get(name, frozenset())
    if any(key not in allowed for key in kwargs):
        return False
    if "alpha" in kwargs and not (_is_scalar(kwargs["alpha"]) and kwargs["alpha"] is not True):
        return False
    return kwargs.get("approximate", "none") in ("none", "tanh")


def _broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...] | None:
    rank = max(len(shape) for shape in shapes)
    out = [1] * rank
    for shape in shapes:
        for position, size in enumerate(shape, start=rank - len(shape)):
            if size == out[position] or size == 1:
                continue
            if out[position] != 1:
                return None
            out[position] = size
    return tuple(out)


def _canonical(meta: TensorMeta) -> bool:
    return meta.strides == contiguous_strides(meta.shape)


def _pointwise(operands: Sequence[Any]) -> TensorMeta | None:
    """The row-major output of a pointwise op over tensors and Python scalars, or None."""
    tensors = [value for value in operands if isinstance(value, TensorMeta)]
    if len(tensors) + sum(_is_scalar(value) for value in operands) != len(operands):
        return None
    ranked = [meta for meta in tensors if meta.ndim > 0]
    if not ranked or any(meta.dtype not in _FLOATING for meta in ranked):
        return None
    if any(meta.dtype.is_complex for meta in tensors):
        return None
    devices = {meta.device for meta in ranked}
    devices |= {m.device for m in tensors if m.ndim == 0 and m.device.type != "cpu"}
    if len(devices) != 1 or not all(_canonical(meta) for meta in ranked):
        return None
    shape = _broadcast([meta.shape for meta in ranked])
    if shape is None or 0 in shape:
        return None
    dtype = ranked[0].dtype
    for meta in ranked[1:]:
        dtype = torch.promote_types(dtype, meta.dtype)
    requires_grad = torch.is_grad_enabled() and any(meta.requires_grad for meta in tensors)
    return TensorMeta(shape, dtype, devices.pop(), None, requires_grad)


def _layer_norm(
    aten_level: bool, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> NodeMeta | None:
    """``F.layer_norm`` (one output) or ``aten.native_layer_norm`` (output, mean, rstd)."""
    names = ("input", "normalized_shape", "weight", "bias", "eps")
    if len(args) > len(names) or any(key not in names[len(args) :] for key in kwargs):
        return None
    bound = dict(zip(names, args, strict=False)) | dict(kwargs)
    source, normalized = bound.get("input"), bound.get("normalized_shape")
    if not isinstance(source, TensorMeta) or not isinstance(normalized, list | tuple):
        return None
    if not _is_scalar(bound.get("eps", 1e-5)) or not all(type(s) is int for s in normalized):
        return None
    normalized = tuple(normalized)
    if source.dtype not in _FLOATING or not _canonical(source):
        return None
    if not normalized or source.shape[source.ndim - len(normalized) :] != normalized:
        return None
    if len(normalized) > source.ndim or 0 in source.shape:
        return None
    affine = [bound.get("weight"), bound.get("bias")]
    for meta in affine:
        if meta is None:
            continue
        if not isinstance(meta, TensorMeta) or meta.shape != normalized or not _canonical(meta):
            return None
        if meta.dtype != source.dtype or meta.device != source.device:
            return None
    if aten_level:
        stats_shape = source.shape[: source.ndim - len(normalized)] + (1,) * len(normalized)
        # Half and bfloat16 statistics stay in fp32: the meta kernel keeps them in the input
        # dtype only on a CPU device, and it only ever sees the meta device.
        stats_dtype = torch.float32 if source.dtype.itemsize == 2 else source.dtype
        stats = TensorMeta(stats_shape, stats_dtype, source.device)
        return (TensorMeta(source.shape, source.dtype, source.device), stats, stats)
    grad = any(meta is not None and meta.requires_grad for meta in [source, *affine])
    requires_grad = torch.is_grad_enabled() and grad
    return TensorMeta(source.shape, source.dtype, source.device, None, requires_grad)


def _arange(args: Sequence[Any], kwargs: Mapping[str, Any]) -> TensorMeta | None:
    """``torch.arange(end)`` with one positive int ``end`` and at most a ``device``: int64
    positions ``[end]`` (``torch.arange(x.shape[1], device=x.device)``, as a transformer's
    position ids; the meta kernel is a Python ref that imports sympy)."""
    if len(args) != 1 or type(args[0]) is not int or args[0] <= 0 or set(kwargs) - {"device"}:
        return None
    device = kwargs.get("device", "cpu")
    if not isinstance(device, torch.device | str):
        return None
    return TensorMeta((args[0],), torch.int64, torch.device(device))


def direct_meta(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> NodeMeta | None:
    """The output metadata of op ``name`` (an :class:`OpRef` name such as ``operator.add``,
    ``torch.nn.functional.gelu`` or ``aten.add.Tensor``) on ``args``/``kwargs``, whose
    tensors are :class:`TensorMeta`; None when this module does not know the answer.

    ``requires_grad`` of a torch-level result follows the grad mode, as on meta tensors
    (ATen-level callers below autograd ignore it).
    """
    if name in _LAYER_NORM:
        return _layer_norm(name.startswith("aten."), args, kwargs)
    if name == "torch.arange":
        return _arange(args, kwargs)
    entry = _POINTWISE.get(name)
    if entry is None:
        return None
    base, arity = entry
    if len(args) != arity or not _keywords_allowed(base, kwargs):
        return None
    if base in _TENSORS_ONLY and not all(isinstance(arg, TensorMeta) for arg in args):
        return None
    if not name.startswith("operator.") and not isinstance(args[0], TensorMeta):
        return None  # only Python operators accept a scalar on the left
    return _pointwise(args)
