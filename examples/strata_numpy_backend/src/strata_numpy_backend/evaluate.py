"""Evaluating a fused :class:`~torchstrata.inductor.ir.kernel.Kernel` with NumPy.

The kernel's domain is ``row_shape + red_shape``; loop variable ``x{d}`` is axis ``d`` and
``r{d}`` axis ``len(row_shape) + d``, each an ``arange`` broadcast along its axis. Index
expressions become integer arrays of element offsets, values become arrays computed over
the variables they use (NumPy broadcasting does the rest); a reduction reduces its body
over the reduced axes, kept as size-1 axes so later values broadcast against it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from torchstrata.inductor.ir.exprs import (
    Constant,
    Expr,
    IndexValue,
    IndirectLoad,
    Load,
    Op,
    ReduceRef,
)
from torchstrata.inductor.ir.indexing import FloorDiv, Index, Mod, Var
from torchstrata.inductor.ir.kernel import Kernel, Store

_DTYPES = {
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.bool: np.bool_,
}


def numpy_dtype(dtype: torch.dtype) -> Any:
    """The NumPy dtype of ``dtype``, or None (16-bit floats, complex: left to ATen)."""
    return _DTYPES.get(dtype)


def _erf(a: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erf, 1, 1)(a).astype(a.dtype)


_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "abs": np.abs,
    "neg": np.negative,
    "exp": np.exp,
    "exp2": np.exp2,
    "expm1": np.expm1,
    "log": np.log,
    "log2": np.log2,
    "log1p": np.log1p,
    "sqrt": np.sqrt,
    "rsqrt": lambda a: np.reciprocal(np.sqrt(a)),
    "reciprocal": np.reciprocal,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "tanh": np.tanh,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "erf": _erf,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,  # half to even, as torch.round
    "trunc": np.trunc,
    "sign": np.sign,
    "isnan": np.isnan,
    "isinf": np.isinf,
}
_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,  # floats only (integer division truncates: left to ATen)
    "remainder": np.remainder,
    "fmod": np.fmod,
    "pow": np.power,
    "maximum": np.maximum,  # both propagate NaN, as torch.maximum
    "minimum": np.minimum,
    "atan2": np.arctan2,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
}
_REDUCE = {"sum": np.sum, "prod": np.prod, "amax": np.max, "amin": np.min}
_COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge"}
_BITWISE = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"}
_INTEGER = {"add", "sub", "mul", "maximum", "minimum", "abs", "neg", "sign", *_COMPARISONS}
_STRUCTURAL = {"where", "convert_element_type"}

#: The prims this backend generates, per operand dtype (others stay extern ATen calls).
SUPPORTED: dict[torch.dtype, frozenset[str]] = {
    torch.float32: frozenset({*_UNARY, *_BINARY, *_REDUCE, *_STRUCTURAL} - _BITWISE),
    torch.float64: frozenset({*_UNARY, *_BINARY, *_REDUCE, *_STRUCTURAL} - _BITWISE),
    torch.int64: frozenset({*_INTEGER, *_BITWISE, *_STRUCTURAL, "sum", "amax", "amin"}),
    torch.int32: frozenset({*_INTEGER, *_BITWISE, *_STRUCTURAL, "sum", "amax", "amin"}),
    torch.bool: frozenset({*_COMPARISONS, *_BITWISE, *_STRUCTURAL} - {"bitwise_not"}),
}


def _flat(tensor: torch.Tensor) -> np.ndarray:
    """The storage from ``tensor``'s first element on, as a flat NumPy view (no copy):
    the kernel's indices are element offsets from there."""
    tensor = tensor.detach()
    size = tensor.untyped_storage().nbytes() // tensor.element_size() - tensor.storage_offset()
    return torch.as_strided(tensor, (size,), (1,), tensor.storage_offset()).numpy()


class _Evaluation:
    """One call of a kernel: the buffers, the loop variables, the values computed."""

    def __init__(self, kernel: Kernel, buffers: dict[str, np.ndarray]) -> None:
        self.buffers = buffers
        ndim = len(kernel.row_shape) + len(kernel.red_shape)
        self.red_axes = tuple(range(len(kernel.row_shape), ndim))
        self.vars: dict[str, np.ndarray] = {}
        for prefix, shape, first in (("x", kernel.row_shape, 0), ("r", kernel.red_shape, None)):
            for d, size in enumerate(shape):
                axis = d if first is not None else len(kernel.row_shape) + d
                self.vars[f"{prefix}{d}"] = np.arange(size).reshape(
                    [size if a == axis else 1 for a in range(ndim)]
                )
        self.reduced: dict[str, np.ndarray] = {}
        self.memo: dict[Expr, np.ndarray] = {}

    def index(self, index: Index) -> np.ndarray:
        total: Any = np.int64(index.const)
        for atom, coeff in index.terms:
            if isinstance(atom, Var):
                value = self.vars[atom.name]
            elif isinstance(atom, FloorDiv):
                value = np.floor_divide(self.index(atom.base), atom.divisor)
            else:
                assert isinstance(atom, Mod)
                value = np.mod(self.index(atom.base), atom.modulus)
            total = total + coeff * value
        return np.asarray(total, dtype=np.int64)

    def value(self, expr: Expr) -> np.ndarray:
        if isinstance(expr, ReduceRef):
            return self.reduced[expr.name]
        if expr not in self.memo:
            self.memo[expr] = self._compute(expr)
        return self.memo[expr]

    def _compute(self, expr: Expr) -> np.ndarray:
        if isinstance(expr, Constant):
            return np.asarray(expr.value, dtype=numpy_dtype(expr.dtype))
        if isinstance(expr, Load):
            return self.buffers[expr.buffer][self.index(expr.index)]
        if isinstance(expr, IndirectLoad):
            position = self.value(expr.indirect).astype(np.int64)
            if np.any((position < 0) | (position >= expr.size)):
                raise IndexError(f"index out of range in gather from {expr.buffer!r}")
            offsets = self.index(expr.index) + expr.stride * position
            return self.buffers[expr.buffer][offsets]
        if isinstance(expr, IndexValue):
            return self.index(expr.index).astype(numpy_dtype(expr.dtype))
        assert isinstance(expr, Op), expr
        args = [self.value(arg) for arg in expr.args]
        dtype = numpy_dtype(expr.dtype)
        if expr.name == "convert_element_type":
            return args[0].astype(dtype)
        if expr.name == "where":
            return np.where(args[0], args[1], args[2]).astype(dtype)
        if expr.name == "bitwise_not":
            return np.invert(args[0])
        if expr.name in _UNARY:
            return np.asarray(_UNARY[expr.name](args[0])).astype(dtype)
        return np.asarray(_BINARY[expr.name](args[0], args[1])).astype(dtype)

    def store(self, store: Store) -> None:
        offsets = self.index(store.index)
        value = self.value(store.value).astype(numpy_dtype(store.dtype))
        offsets, value = np.broadcast_arrays(offsets, value)
        self.buffers[store.buffer][offsets.ravel()] = value.ravel()


class KernelFunction:
    """``KernelFunction(kernel)(*tensors)``: ``kernel`` run on its argument tensors."""

    def __init__(self, kernel: Kernel) -> None:
        if kernel.tail is not None or kernel.partials is not None or kernel.parts:
            raise NotImplementedError("tails, partials and horizontal kernels: Triton only")
        self.kernel = kernel

    def __call__(self, *tensors: torch.Tensor) -> None:
        kernel = self.kernel
        buffers = {
            arg.name: _flat(tensor) for arg, tensor in zip(kernel.args, tensors, strict=True)
        }
        run = _Evaluation(kernel, buffers)
        with np.errstate(all="ignore"):  # inf and NaN are values here, as in torch
            for spec in kernel.reductions:
                body = np.broadcast_to(run.value(spec.body), _domain(kernel))
                reduced = _REDUCE[spec.kind](body, axis=run.red_axes, keepdims=True)
                run.reduced[spec.name] = reduced.astype(numpy_dtype(spec.dtype))
            for store in (*kernel.row_stores, *kernel.full_stores):
                run.store(store)


def _domain(kernel: Kernel) -> tuple[int, ...]:
    return (*kernel.row_shape, *kernel.red_shape)
