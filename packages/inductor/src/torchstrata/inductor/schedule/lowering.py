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
from collections.abc import Callable, Collection, Sequence

import attrs
import torch

from torchstrata.core import (
    Graph,
    Node,
    OpKind,
    Prim,
    TensorMeta,
    broadcast_strides,
    is_dense,
    prims_of,
)
from torchstrata.core.prims import ELEMENTWISE_FAMILIES
from torchstrata.inductor.ir.exprs import Constant, Expr, IndexValue, IndirectLoad
from torchstrata.inductor.ir.indexing import Index, linear_offset, row_major_strides
from torchstrata.inductor.ir.kernel import reduction_identity
from torchstrata.inductor.ir.kernel_ops import KernelOp
from torchstrata.inductor.schedule.index_fns import (
    IndexFn,
    IndexTuple,
    ValueContext,
    cat_fn,
    elementwise_fn,
    power_fn,
    rand_fn,
    selected_scalar,
    small_power,
    view_fn,
)
from torchstrata.inductor.schedule.templates import shape_templates
from torchstrata.inductor.schedule.view_strides import view_strides


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
    """Lower one node whose operands are already lowered (by :data:`LOWERINGS`)."""
    assert node.op is not None
    if node.op.kind is not OpKind.PRIMS:
        return Extern(node, f"{node.op.name} has no lowering")
    meta = node.meta
    if not isinstance(meta, TensorMeta) or node.kwargs:
        return Extern(node, "unexpected keyword arguments or metadata")
    prim = Prim.of(node.op.name)
    if meta.dtype.is_complex or any(
        isinstance(arg, Node) and arg.tensor_meta.dtype.is_complex for arg in node.args
    ):
        return Extern(node, "complex dtypes are not generated")
    return LOWERINGS[prim](node, lowered, supports)


#: ``lowering(node, lowered operands, supports) -> Lowered`` of one prim.
Lowering = Callable[[Node, dict[Node, Lowered], Supports], Lowered]


def _no_lowering(node: Node, lowered: dict[Node, Lowered], supports: Supports) -> Lowered:
    """Run by ATen between kernels (declared: the prim has no index function)."""
    return Extern(node, f"{node.op} has no lowering")


def _lower_elementwise(node: Node, lowered: dict[Node, Lowered], supports: Supports) -> Lowered:
    name = Prim.of(str(node.op)).value
    if name == "pow" and small_power(node) is not None:
        return Pointwise(node, power_fn(node))
    operand_dtype = next(arg.tensor_meta.dtype for arg in node.args if isinstance(arg, Node))
    if name == "where":
        operand_dtype = node.tensor_meta.dtype
    if not supports(name, operand_dtype):
        return Extern(node, f"the backend does not generate prims.{name} for {operand_dtype}")
    return Pointwise(node, elementwise_fn(name, node))


def _lower_reduction(node: Node, lowered: dict[Node, Lowered], supports: Supports) -> Lowered:
    name = Prim.of(str(node.op)).value
    meta = node.tensor_meta
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
    return Reduction(node, name, source, dims, meta.shape, tuple(shape[d] for d in dims))


def _lower_view(node: Node, lowered: dict[Node, Lowered], supports: Supports) -> Lowered:
    name = Prim.of(str(node.op)).value
    if name == "as_strided" and _is_buffer(lowered[node.args[0]]):
        # torch.as_strided addresses the storage, not the tensor: let ATen make the view.
        return Extern(node, "as_strided of a buffer is made by torch (a view, no copy)")
    return Pointwise(node, view_fn(name, node), buffer_view(node, lowered))


def _lower_cat(node: Node, lowered: dict[Node, Lowered], supports: Supports) -> Lowered:
    if all(supports("where", arg.tensor_meta.dtype) for arg in node.args[0]):
        return Pointwise(node, cat_fn(node))
    return _no_lowering(node, lowered, supports)


def _lower_full(node: Node, lowered: dict[Node, Lowered], supports: Supports) -> Lowered:
    _shape, value, dtype, _device = node.args
    value = selected_scalar(value, dtype)
    return Pointwise(node, lambda ctx, index: Constant(value, dtype))


def _lower_iota(node: Node, lowered: dict[Node, Lowered], supports: Supports) -> Lowered:
    _length, start, step, dtype, _device = node.args
    return Pointwise(node, lambda ctx, index: IndexValue(index[0] * step + start, dtype))


def _lower_rand(node: Node, lowered: dict[Node, Lowered], supports: Supports) -> Lowered:
    if supports(KernelOp.RAND_BITS.value, torch.int64):
        return Pointwise(node, rand_fn(node))
    return _no_lowering(node, lowered, supports)


def _lower_gather(node: Node, lowered: dict[Node, Lowered], supports: Supports) -> Lowered:
    """``prims.gather(x, dim, index)`` as an :class:`~torchstrata.inductor.ir.exprs.IndirectLoad`
    when ``x`` is a float buffer (an input, an extern result) or a strided view of one.

    Element ``i`` reads ``index[i]``, then ``x`` at ``i`` with coordinate ``dim`` replaced
    by it: one load at a data-dependent offset, inlined into the kernels of its users like
    any pointwise value (the index computed there or loaded). Where eager raises (an index
    outside ``[0, x.shape[dim])``) no kernel reads out of bounds: the C++ call raises
    ``IndexError`` (``cpp_checks.py``), a Triton kernel gives NaN. Left to an extern ATen gather:

    * ``x`` computed, not in memory: the extern call materialises it (a gather of one index
      per row of a computed value is a where-sum, see :mod:`~torchstrata.inductor.passes.rewrites`);
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


def buffer_view(
    node: Node, lowered: dict[Node, Lowered], stored: Collection[Node] = ()
) -> StridedView | None:
    """The :class:`StridedView` of a view prim whose operand is a buffer or a view of one.

    ``stored``: computed values that a kernel stores (densely, see :func:`dense_strides`)
    though rule 1 of the scheduler would inline them; they count as buffers too."""
    source: Node = node.args[0]
    operand = lowered[source]
    if _is_buffer(operand):
        base = StridedView(source, source.tensor_meta.shape, source.tensor_meta.strides, 0)
    elif isinstance(operand, Pointwise) and operand.view is not None:
        base = operand.view
    elif source in stored:
        meta = source.tensor_meta
        base = StridedView(source, meta.shape, dense_strides(meta.shape, meta.strides), 0)
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
    elif name == "reshape" and not all(type(s) is int for s in (*base.shape, *strides, *out_shape)):
        found = view_strides(base.shape, strides, out_shape)  # sizes that record (0382)
        if found is None:
            return None
        strides = found
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


#: How each prim is lowered: every :class:`~torchstrata.core.Prim` has an entry (a prim
#: without an index function is declared with ``_no_lowering``: ATen runs it).
LOWERINGS: dict[Prim, Lowering] = {
    **{
        member: _lower_elementwise for family in ELEMENTWISE_FAMILIES for member in prims_of(family)
    },
    Prim.SUM: _lower_reduction,
    Prim.PROD: _lower_reduction,
    Prim.AMAX: _lower_reduction,
    Prim.AMIN: _lower_reduction,
    Prim.ARGMAX: _no_lowering,
    Prim.ARGMIN: _no_lowering,
    Prim.BROADCAST_IN_DIM: _lower_view,
    Prim.RESHAPE: _lower_view,
    Prim.PERMUTE: _lower_view,
    Prim.SLICE: _lower_view,
    Prim.AS_STRIDED: _lower_view,
    Prim.FULL: _lower_full,
    Prim.IOTA: _lower_iota,
    Prim.CUMSUM: _no_lowering,
    Prim.CAT: _lower_cat,
    Prim.GATHER: _lower_gather,
    Prim.SCATTER: _no_lowering,
    Prim.SCATTER_ADD: _no_lowering,
    Prim.RAND: _lower_rand,
}
