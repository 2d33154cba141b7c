"""Index functions of pointwise values: what an elementwise prim, ``pow`` by a small
constant, ``cat``, ``rand`` or a view computes at an index of its output, asking a
:class:`ValueContext` for its operands' values (the scheduler decides whether an operand
is inlined, loaded or read as a reduction result)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from torchstrata.core import Node
from torchstrata.core.prims_indexing import RAND_BITS, RAND_DEFAULT_BITS
from torchstrata.inductor.ir.exprs import Constant, Expr, IndexValue, Load, Op
from torchstrata.inductor.ir.indexing import Index, linear_offset, row_major_strides
from torchstrata.inductor.ir.kernel_ops import KernelOp
from torchstrata.inductor.schedule.view_index import VIEW_INDEX, IndexTuple


class ValueContext(Protocol):
    """What an index function may ask: the value of ``node`` at ``index``, or an element
    of a buffer (an input or an extern result) at a linear offset."""

    def value(self, node: Node, index: IndexTuple) -> Expr:
        """The expression for element ``index`` of ``node``."""
        ...

    def buffer_load(self, node: Node, offset: Index) -> Load:
        """Element ``offset`` (counted from its first element) of the buffer ``node``."""
        ...


IndexFn = Callable[[ValueContext, IndexTuple], Expr]


def rand_fn(node: Node) -> IndexFn:
    """``prims.rand`` in the kernel: ``rand_bits(seed, offset + row-major index, bits)``
    (the top ``bits`` of the hash, see ``core.prims_indexing.rand``), scaled by
    ``2**-bits`` in float32 (exact) and rounded to the dtype, as the reference does."""
    shape, seed, offset, dtype, _device = node.args
    bits = RAND_BITS.get(dtype, RAND_DEFAULT_BITS)
    strides = row_major_strides(shape)

    def rand_fn(ctx: ValueContext, index: IndexTuple) -> Expr:
        counter = IndexValue(linear_offset(index, strides, offset), torch.int64)
        seed_value = ctx.value(seed, ()) if isinstance(seed, Node) else Constant(seed, torch.int64)
        drawn_args = (seed_value, counter, Constant(bits, torch.int64))
        drawn = Op(KernelOp.RAND_BITS.value, drawn_args, torch.int64)
        value = Op("convert_element_type", (drawn,), torch.float32)
        value = Op("mul", (value, Constant(2.0**-bits, torch.float32)), torch.float32)
        return value if dtype is torch.float32 else Op("convert_element_type", (value,), dtype)

    return rand_fn


def operand_expr(ctx: ValueContext, arg: Any, index: IndexTuple, dtype: torch.dtype) -> Expr:
    if isinstance(arg, Node):
        return ctx.value(arg, index)
    return Constant(arg, dtype)


#: Prims whose result is one of their operands: a Python scalar among them is a value of
#: the result's dtype (eager converts it, ``clamp``/``where`` alike), so a 16-bit one is
#: rounded to that dtype here. So do eager's add and sub (``x_f16 + 0.1`` adds
#: float16(0.1)); mul and div keep their scalars in float32, as eager's opmath.
_SELECTIONS = frozenset({"where", "maximum", "minimum", "add", "sub"})


def selected_scalar(value: Any, dtype: torch.dtype) -> Any:
    """``value`` rounded to ``dtype`` when it is a float scalar and ``dtype`` 16-bit."""
    if isinstance(value, float) and dtype in (torch.float16, torch.bfloat16):
        return torch.tensor(value, dtype=dtype).item()
    return value


def elementwise_fn(name: str, node: Node) -> IndexFn:
    meta = node.tensor_meta
    args = node.args
    tensor_dtype = next(arg.tensor_meta.dtype for arg in args if isinstance(arg, Node))
    if name == "convert_element_type":
        source = args[0]
        return lambda ctx, index: Op(name, (ctx.value(source, index),), meta.dtype)
    if name == "where":
        value_dtype = meta.dtype

        def where_fn(ctx: ValueContext, index: IndexTuple) -> Expr:
            pred = operand_expr(ctx, args[0], index, torch.bool)
            return Op(
                name,
                (
                    pred,
                    operand_expr(ctx, selected_scalar(args[1], value_dtype), index, value_dtype),
                    operand_expr(ctx, selected_scalar(args[2], value_dtype), index, value_dtype),
                ),
                value_dtype,
            )

        return where_fn
    if name in _SELECTIONS:
        args = tuple(selected_scalar(arg, tensor_dtype) for arg in args)
    return lambda ctx, index: Op(
        name, tuple(operand_expr(ctx, arg, index, tensor_dtype) for arg in args), meta.dtype
    )


_POWERS = (1, 2, 3, 4, 0.5, -1)


def small_power(node: Node) -> int | float | None:
    """The exponent of ``pow(tensor, c)`` for ``c`` in :data:`_POWERS` on floats, else None."""
    base, exponent = node.args
    if (
        not isinstance(base, Node)
        or isinstance(exponent, bool)
        or not node.tensor_meta.dtype.is_floating_point
    ):
        return None
    if isinstance(exponent, int | float) and exponent in _POWERS:
        return exponent
    return None


def power_fn(node: Node) -> IndexFn:
    """``x ** c`` for a small constant ``c``: products, ``sqrt`` or ``reciprocal`` (no libdevice)."""
    base = node.args[0]
    exponent = small_power(node)
    assert exponent is not None
    dtype = node.tensor_meta.dtype

    def power_fn(ctx: ValueContext, index: IndexTuple) -> Expr:
        value = ctx.value(base, index)
        if base.tensor_meta.dtype != dtype:
            value = Op("convert_element_type", (value,), dtype)
        if exponent == 0.5:
            return Op("sqrt", (value,), dtype)
        if exponent == -1:
            return Op("reciprocal", (value,), dtype)
        result = value
        for _ in range(int(exponent) - 1):
            result = Op("mul", (result, value), dtype)
        return result

    return power_fn


def cat_fn(node: Node) -> IndexFn:
    """Concatenation as a chain of ``where`` over the position along ``dim`` (no copies).

    Every piece is read at ``(i - start) mod size`` (made non-negative by adding a multiple
    of ``size``): in bounds for any ``i``, so the loads ``where`` does not select are harmless.
    """
    pieces, dim = node.args
    dtype = node.tensor_meta.dtype
    spans, start = [], 0
    for piece in pieces:
        size = piece.tensor_meta.shape[dim]
        if size:
            spans.append((piece, start, size))
        start += size

    def cat_fn(ctx: ValueContext, index: IndexTuple) -> Expr:
        position = IndexValue(index[dim], torch.int64)
        result: Expr | None = None
        for piece, begin, size in reversed(spans):
            shift = -(-begin // size) * size - begin  # the smallest k*size - begin >= 0
            inner = (index[dim] + shift).mod(size)
            value = ctx.value(piece, (*index[:dim], inner, *index[dim + 1 :]))
            if result is None:
                result = value
            else:
                before = Op("lt", (position, Constant(begin + size, torch.int64)), torch.bool)
                result = Op("where", (before, value, result), dtype)
        return result if result is not None else Constant(0, dtype)

    return cat_fn


def view_fn(name: str, node: Node) -> IndexFn:
    source: Node = node.args[0]
    in_shape = source.tensor_meta.shape
    transform = VIEW_INDEX[name](in_shape, node.tensor_meta.shape, *node.args[1:])
    return lambda ctx, index: ctx.value(source, transform(index))
