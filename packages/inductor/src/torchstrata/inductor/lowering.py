"""Lowering: every node of a prims graph becomes an index function over its output.

* graph inputs and extern results are buffers: element ``idx`` is a strided load;
* elementwise prims, ``full`` and ``iota`` are :class:`Pointwise`: an expression built
  from the values of their operands at the same index;
* ``gather`` of a float buffer (or of a view of one) is :class:`Pointwise` too: a load at
  an offset read from its index operand (see :func:`_lower_gather`);
* views (``broadcast_in_dim``, ``permute``, ``slice``, ``reshape``, ``as_strided``) are
  :class:`Pointwise` too: they only rewrite the index before asking their operand, so a
  chain of views over an input becomes one strided load, never a copy;
* reductions are :class:`Reduction`: a body evaluated at (row index, reduced index);
* anything else (ATen ops, ``getitem``, prims a backend cannot generate) is
  :class:`Extern` and runs through ATen between kernels.

An index function asks a :class:`ValueContext` for the values of its operands; the
scheduler's context decides whether an operand is inlined, loaded from memory, or read
as a reduction result of the current kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs
import torch

from torchstrata.core import (
    Graph,
    Node,
    OpKind,
    TensorMeta,
    broadcast_strides,
    get_prim,
    is_dense,
)
from torchstrata.core.prims_indexing import RAND_BITS, RAND_DEFAULT_BITS
from torchstrata.inductor.exprs import Constant, Expr, IndexValue, IndirectLoad, Load, Op
from torchstrata.inductor.indexing import Index, delinearize, linear_offset, row_major_strides
from torchstrata.inductor.kernel import reduction_identity
from torchstrata.inductor.templates import shape_templates

IndexTuple = tuple[Index, ...]

REDUCTION_KINDS = ("sum", "prod", "amax", "amin")
VIEW_PRIMS = ("broadcast_in_dim", "permute", "slice", "reshape", "as_strided")


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


@attrs.frozen
class StridedView:
    """A view of a buffer ``base`` that torch can make without a copy (``as_strided``).

    ``offset`` counts elements from ``base``'s first element, so the launcher makes it as
    ``as_strided(base, shape, strides, base.storage_offset() + offset)``.
    """

    base: Node
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int


@attrs.frozen(eq=False)
class Pointwise:
    """A value computed per element: ``fn(ctx, index)``.

    ``view`` is set for views (chains of them) of a buffer: an extern call that reads the
    value gets a torch view of the buffer instead of a materialised copy.
    """

    node: Node
    fn: IndexFn
    view: StridedView | None = None


@attrs.frozen(eq=False)
class Reduction:
    """``kind`` (sum/prod/amax/amin) of ``source`` over ``dims``.

    ``row_shape`` is the output shape, ``red_shape`` the sizes of the reduced dims.
    """

    node: Node
    kind: str
    source: Node
    dims: tuple[int, ...]
    row_shape: tuple[int, ...]
    red_shape: tuple[int, ...]

    def body(self, ctx: ValueContext, row: IndexTuple, red: IndexTuple) -> Expr:
        """The element of ``source`` that row ``row``, reduced position ``red`` reads."""
        rows, reds = iter(row), iter(red)
        ndim = len(self.row_shape) + len(self.red_shape)
        index = tuple(next(reds) if dim in self.dims else next(rows) for dim in range(ndim))
        return ctx.value(self.source, index)


@attrs.frozen(eq=False)
class Extern:
    """A node run eagerly between kernels; ``reason`` says why it was not generated.

    ``allocate_only``: the node is a shape template (:mod:`.templates`); the launcher
    allocates it uninitialised instead of computing it."""

    node: Node
    reason: str
    allocate_only: bool = False


@attrs.frozen(eq=False)
class InputBuffer:
    """A graph input."""

    node: Node


Lowered = Pointwise | Reduction | Extern | InputBuffer

#: ``supports(prim_name, operand dtype) -> bool``: can the backend generate this prim?
Supports = Callable[[str, torch.dtype], bool]


def lower_graph(graph: Graph, supports: Supports) -> dict[Node, Lowered]:
    """Lower every node of a prims graph (see the module docstring)."""
    lowered: dict[Node, Lowered] = {node: InputBuffer(node) for node in graph.inputs}
    templates = shape_templates(graph)
    for node in graph.nodes:
        if node in templates:
            reason = "read only for its shape by random ops: allocated, not filled"
            lowered[node] = Extern(node, reason, allocate_only=True)
        else:
            lowered[node] = lower_node(node, lowered, supports)
    return lowered


def _is_buffer(lowered: Lowered) -> bool:
    return isinstance(lowered, InputBuffer | Extern)


def lower_node(node: Node, lowered: dict[Node, Lowered], supports: Supports) -> Lowered:
    """Lower one node whose operands are already lowered."""
    assert node.op is not None
    if node.op.kind is not OpKind.PRIMS:
        return Extern(node, f"{node.op.name} has no lowering")
    meta = node.meta
    if not isinstance(meta, TensorMeta) or node.kwargs:
        return Extern(node, "unexpected keyword arguments or metadata")
    name = node.op.name.removeprefix("prims.")
    prim = get_prim(name)
    if meta.dtype.is_complex or any(
        isinstance(arg, Node) and arg.tensor_meta.dtype.is_complex for arg in node.args
    ):
        return Extern(node, "complex dtypes are not generated")
    if name == "pow" and _small_power(node) is not None:
        return Pointwise(node, _power_fn(node))
    if prim.is_elementwise:
        operand_dtype = next(arg.tensor_meta.dtype for arg in node.args if isinstance(arg, Node))
        if name == "where":
            operand_dtype = meta.dtype
        if not supports(name, operand_dtype):
            return Extern(node, f"the backend does not generate prims.{name} for {operand_dtype}")
        return Pointwise(node, _elementwise_fn(name, node))
    if name in REDUCTION_KINDS:
        source, dims = node.args
        dims = tuple(sorted(dims))
        if not dims:
            return Pointwise(node, lambda ctx, index: ctx.value(source, index))
        if not supports(name, source.tensor_meta.dtype):
            return Extern(node, f"the backend does not reduce {source.tensor_meta.dtype}")
        shape = source.tensor_meta.shape
        if any(shape[d] == 0 for d in dims):  # nothing to reduce: the identity, no loads
            identity = Constant(reduction_identity(name, meta.dtype), meta.dtype)
            return Pointwise(node, lambda ctx, index: identity)
        return Reduction(
            node, name, source, dims, node.tensor_meta.shape, tuple(shape[d] for d in dims)
        )
    if name == "as_strided" and _is_buffer(lowered[node.args[0]]):
        # torch.as_strided addresses the storage, not the tensor: let ATen make the view.
        return Extern(node, "as_strided of a buffer is made by torch (a view, no copy)")
    if name in VIEW_PRIMS:
        return Pointwise(node, _view_fn(name, node), buffer_view(node, lowered))
    if name == "gather":
        return _lower_gather(node, lowered, supports)
    if name == "cat" and all(supports("where", arg.tensor_meta.dtype) for arg in node.args[0]):
        return Pointwise(node, _cat_fn(node))
    if name == "full":
        shape, value, dtype, _device = node.args
        value = _selected_scalar(value, dtype)
        return Pointwise(node, lambda ctx, index: Constant(value, dtype))
    if name == "iota":
        _length, start, step, dtype, _device = node.args
        return Pointwise(node, lambda ctx, index: IndexValue(index[0] * step + start, dtype))
    if name == "rand" and supports("rand_bits", torch.int64):
        return Pointwise(node, _rand_fn(node))
    return Extern(node, f"prims.{name} has no lowering")


def _rand_fn(node: Node) -> IndexFn:
    """``prims.rand`` in the kernel: ``rand_bits(seed, offset + row-major index, bits)``
    (the top ``bits`` of the hash, see ``core.prims_indexing.rand``), scaled by
    ``2**-bits`` in float32 (exact) and rounded to the dtype, as the reference does."""
    shape, seed, offset, dtype, _device = node.args
    bits = RAND_BITS.get(dtype, RAND_DEFAULT_BITS)
    strides = row_major_strides(shape)

    def rand_fn(ctx: ValueContext, index: IndexTuple) -> Expr:
        counter = IndexValue(linear_offset(index, strides, offset), torch.int64)
        seed_value = ctx.value(seed, ()) if isinstance(seed, Node) else Constant(seed, torch.int64)
        drawn = Op("rand_bits", (seed_value, counter, Constant(bits, torch.int64)), torch.int64)
        value = Op("convert_element_type", (drawn,), torch.float32)
        value = Op("mul", (value, Constant(2.0**-bits, torch.float32)), torch.float32)
        return value if dtype is torch.float32 else Op("convert_element_type", (value,), dtype)

    return rand_fn


def _operand(ctx: ValueContext, arg: Any, index: IndexTuple, dtype: torch.dtype) -> Expr:
    if isinstance(arg, Node):
        return ctx.value(arg, index)
    return Constant(arg, dtype)


#: Prims whose result is one of their operands: a Python scalar among them is a value of
#: the result's dtype (eager converts it, ``clamp``/``where`` alike), so a 16-bit one is
#: rounded to that dtype here. So do eager's add and sub (``x_f16 + 0.1`` adds
#: float16(0.1)); mul and div keep their scalars in float32, as eager's opmath.
_SELECTIONS = frozenset({"where", "maximum", "minimum", "add", "sub"})


def _selected_scalar(value: Any, dtype: torch.dtype) -> Any:
    """``value`` rounded to ``dtype`` when it is a float scalar and ``dtype`` 16-bit."""
    if isinstance(value, float) and dtype in (torch.float16, torch.bfloat16):
        return torch.tensor(value, dtype=dtype).item()
    return value


def _elementwise_fn(name: str, node: Node) -> IndexFn:
    meta = node.tensor_meta
    args = node.args
    tensor_dtype = next(arg.tensor_meta.dtype for arg in args if isinstance(arg, Node))
    if name == "convert_element_type":
        source = args[0]
        return lambda ctx, index: Op(name, (ctx.value(source, index),), meta.dtype)
    if name == "where":
        value_dtype = meta.dtype

        def where_fn(ctx: ValueContext, index: IndexTuple) -> Expr:
            pred = _operand(ctx, args[0], index, torch.bool)
            return Op(
                name,
                (
                    pred,
                    _operand(ctx, _selected_scalar(args[1], value_dtype), index, value_dtype),
                    _operand(ctx, _selected_scalar(args[2], value_dtype), index, value_dtype),
                ),
                value_dtype,
            )

        return where_fn
    if name in _SELECTIONS:
        args = tuple(_selected_scalar(arg, tensor_dtype) for arg in args)
    return lambda ctx, index: Op(
        name, tuple(_operand(ctx, arg, index, tensor_dtype) for arg in args), meta.dtype
    )


_POWERS = (1, 2, 3, 4, 0.5, -1)


def _small_power(node: Node) -> int | float | None:
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


def _power_fn(node: Node) -> IndexFn:
    """``x ** c`` for a small constant ``c``: products, ``sqrt`` or ``reciprocal`` (no libdevice)."""
    base = node.args[0]
    exponent = _small_power(node)
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


def _cat_fn(node: Node) -> IndexFn:
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


def _lower_gather(node: Node, lowered: dict[Node, Lowered], supports: Supports) -> Lowered:
    """``prims.gather(x, dim, index)`` as an :class:`~torchstrata.inductor.exprs.IndirectLoad`
    when ``x`` is a float buffer (an input, an extern result) or a strided view of one.

    Element ``i`` reads ``index[i]``, then ``x`` at ``i`` with coordinate ``dim`` replaced
    by it: one load at a data-dependent offset, inlined into the kernels of its users like
    any pointwise value (the index computed there or loaded). Where eager raises (an index
    outside ``[0, x.shape[dim])``) no kernel reads out of bounds: the C++ call raises
    ``IndexError`` (``cpp_checks.py``), a Triton kernel gives NaN. Left to an extern ATen gather:

    * ``x`` computed, not in memory: the extern call materialises it (a gather of one index
      per row of a computed value is a where-sum, see :mod:`~torchstrata.inductor.rewrites`);
    * integer and bool ``x``: no value of the dtype can mark an out-of-range index (a 0
      would pass as a plausible result), so ATen checks the indices and raises as eager does;
    * an index larger than ``x`` along another dim (eager rejects it whatever the values),
      an empty ``dim`` (every index is out of range: rather than emit a load that is always
      masked) and a 0-dim ``x``.
    """
    source, dim, index = node.args
    meta = source.tensor_meta
    operand = lowered[source]
    if _is_buffer(operand):
        view: StridedView | None = StridedView(source, meta.shape, meta.strides, 0)
    else:
        view = operand.view if isinstance(operand, Pointwise) else None
    if view is None:
        return Extern(node, "gather of a computed value (not a buffer or a view of one)")
    if not meta.dtype.is_floating_point or not supports("where", meta.dtype):
        return Extern(node, f"gather of {meta.dtype}: no value marks an out-of-range index")
    shape, index_shape = meta.shape, index.tensor_meta.shape
    if (
        not shape
        or shape[dim] == 0
        or any(i > s for d, (i, s) in enumerate(zip(index_shape, shape, strict=True)) if d != dim)
    ):
        return Extern(node, "a 0-dim source, an empty gathered dim or an index wider than x")
    return Pointwise(node, _gather_fn(node, view))


def _gather_fn(node: Node, view: StridedView) -> IndexFn:
    """The index function of a gather from the strided ``view`` of a buffer."""
    _source, dim, index_node = node.args
    size, stride, dtype = view.shape[dim], view.strides[dim], node.tensor_meta.dtype

    def gather_fn(ctx: ValueContext, index: IndexTuple) -> Expr:
        position = ctx.value(index_node, index)
        rest = (*index[:dim], Index(), *index[dim + 1 :])
        load = ctx.buffer_load(view.base, linear_offset(rest, view.strides, view.offset))
        return IndirectLoad(load.buffer, load.index, position, stride, size, dtype)

    return gather_fn


def _view_fn(name: str, node: Node) -> IndexFn:
    source: Node = node.args[0]
    in_shape = source.tensor_meta.shape
    transform = _VIEW_INDEX[name](in_shape, node.tensor_meta.shape, *node.args[1:])
    return lambda ctx, index: ctx.value(source, transform(index))


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


_VIEW_INDEX: dict[str, Callable[..., Callable[[IndexTuple], IndexTuple]]] = {
    "broadcast_in_dim": _broadcast_index,
    "permute": _permute_index,
    "slice": _slice_index,
    "reshape": _reshape_index,
    "as_strided": _as_strided_index,
}


def buffer_view(node: Node, lowered: dict[Node, Lowered]) -> StridedView | None:
    """The :class:`StridedView` of a view prim whose operand is a buffer or a view of one."""
    source: Node = node.args[0]
    operand = lowered[source]
    if _is_buffer(operand):
        base = StridedView(source, source.tensor_meta.shape, source.tensor_meta.strides, 0)
    elif isinstance(operand, Pointwise) and operand.view is not None:
        base = operand.view
    else:
        return None
    name = node.op.name.removeprefix("prims.") if node.op is not None else ""
    out_shape = node.tensor_meta.shape
    strides = base.strides
    offset = base.offset
    if name == "permute":
        strides = tuple(strides[d] for d in node.args[1])
    elif name == "slice":
        starts, _limits, steps = node.args[1:4]
        offset += sum(start * stride for start, stride in zip(starts, strides, strict=True))
        strides = tuple(stride * step for stride, step in zip(strides, steps, strict=True))
    elif name == "broadcast_in_dim":
        strides = broadcast_strides(base.shape, strides, out_shape, node.args[2])
    elif name == "reshape":
        try:
            probe = torch.empty_strided(base.shape, strides, device="meta")
            strides = tuple(probe.view(out_shape).stride())
        except RuntimeError:
            return None
    else:
        return None
    return StridedView(base.base, tuple(out_shape), strides, offset)


def dense_strides(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, ...]:
    """``strides`` if they describe a dense, non-overlapping layout of ``shape``, else row-major."""
    if math.prod(shape) > 0 and is_dense(shape, strides):
        return tuple(strides)
    return row_major_strides(shape)
