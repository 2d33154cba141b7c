"""CPU convolutions on channels-last inputs (decision 0230).

ATen's CPU convolution (oneDNN) works in a blocked channels-last form: a row-major
``[N, C, H, W]`` input is reordered into it and the result reordered back on every
call, a channels-last input is read as it is and gives a channels-last result. For a
2-D convolution whose input is row-major, the input is copied into channels-last by a
kernel (``prims.mul(x, 1)`` stored channels-last: a computed input, e.g. the batch norm
and ReLU before the next convolution, is stored that way by the kernel that computes
it, at no extra cost) and the convolution's result is recorded channels-last; the
pointwise kernels after it read it in that layout. Its weight is copied into
channels-last too (decision 0371): ATen otherwise copies a row-major weight itself on
every call (``contiguous``, a fresh allocation), 50-100 us more per M4 convolution than
our kernel's copy and the convolution of the copy. A
row-major graph output computed elementwise from such results (and from convolution
inputs, read through their copies) is computed by a kernel that walks its channels-last
operands in their order and stores the output row-major across the short channel dim
(decision 0370: 0.16 ms for M4's block, one thread, against 0.14 + 0.36 for a
channels-last kernel and ATen's copy into the graph's layout, and 0.78 ms for a kernel
that walks the output's rows and loads across the channels-last ones).
torch.compile's CPU layout optimisation does the same (M4's ResNet block: 0.84x of
torch.compile before).

A convolution is left alone unless ATen's backend selection, asked about a
channels-last input, answers channels-last; unless every reader of its result is an
elementwise or reduction prim (a view's or an extern op's recorded strides would no
longer describe it) and the result is no graph output (the caller gets eager's layout);
and unless every value stored from it is stored channels-last (through elementwise prims
into convolutions run so, or into outputs computed so): a max pool's operand or a
reduction's rows stored row-major from channels-last rows made ResNet-18 slower.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch

from torchstrata.core import (
    Graph,
    Node,
    OpKind,
    Prim,
    PrimFamily,
    TensorMeta,
    Transformer,
    contiguous_strides,
    is_dense,
    prim,
    same_layout,
)
from torchstrata.core.conv_layouts import cpu_convolution_format

_CONVOLUTION = "aten.convolution.default"
_MUL = prim("mul")
_BROADCAST = prim("broadcast_in_dim")
#: readers that address the result by index only (no recorded strides of their own)
_INDEXED_FAMILIES = frozenset(
    {
        PrimFamily.UNARY,
        PrimFamily.BINARY,
        PrimFamily.TERNARY,
        PrimFamily.COMPARISON,
        PrimFamily.CAST,
        PrimFamily.REDUCTION,
    }
)


def channels_last_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """The strides of ``[N, C, H, W]`` in channels-last order (``torch.channels_last``)."""
    n, c, h, w = shape
    del n
    return (c * h * w, 1, w * c, c)


def _reads_by_index(reader: Node) -> bool:
    if reader.op is None or reader.op.kind is not OpKind.PRIMS:
        return False
    return Prim.of(reader.op.name).family in _INDEXED_FAMILIES


def _conv_result_layout(node: Node) -> tuple[int, ...] | None:
    """The strides ATen's CPU convolution gives ``node``'s result for channels-last
    operands, when they are channels-last; else None."""
    x, weight, bias, *settings = node.args
    x_meta, w_meta = x.tensor_meta, weight.tensor_meta
    try:
        cpu_x = torch.empty_strided(
            x_meta.shape, channels_last_strides(x_meta.shape), dtype=x_meta.dtype
        )
        cpu_w = torch.empty_strided(w_meta.shape, w_meta.strides, dtype=w_meta.dtype)
        cpu_b = None
        if isinstance(bias, Node):
            cpu_b = torch.empty(bias.tensor_meta.shape, dtype=bias.tensor_meta.dtype)
    except (RuntimeError, TypeError, ValueError):  # not askable here
        return None
    layout = cpu_convolution_format(cpu_x, cpu_w, cpu_b, settings)
    if layout != torch.channels_last:
        return None
    return channels_last_strides(node.tensor_meta.shape)


def _relaid_result(
    node: Node, readers: Sequence[Node], outputs: frozenset[Node]
) -> tuple[int, ...] | None:
    """The result strides of a convolution worth running channels-last, else None."""
    if str(node.op) != _CONVOLUTION or len(node.args) != 9:
        return None
    x, weight = node.args[0], node.args[1]
    if not isinstance(x, Node) or not isinstance(weight, Node):
        return None
    meta, x_meta, w_meta = node.tensor_meta, x.tensor_meta, weight.tensor_meta
    if meta is None or x_meta is None or w_meta is None or len(x_meta.shape) != 4:
        return None
    if len(w_meta.shape) != 4 or x_meta.device.type != "cpu":
        return None
    if not all(type(size) is int for size in (*x_meta.shape, *w_meta.shape)):
        return None  # symbolic sizes: backend selection is asked on concrete ones
    if not x_meta.dtype.is_floating_point or node in outputs or not readers:
        return None
    want = channels_last_strides(x_meta.shape)
    if same_layout(x_meta.shape, x_meta.strides, want) or not is_dense(meta.shape, meta.strides):
        return None  # a channels-last input runs channels-last already
    if same_layout(meta.shape, meta.strides, channels_last_strides(meta.shape)):
        return None
    if not all(_reads_by_index(reader) for reader in readers):
        return None
    return _conv_result_layout(node)


def _elementwise(node: Node) -> bool:
    return _reads_by_index(node) and Prim.of(str(node.op)).family is not PrimFamily.REDUCTION


def _output_chain(output: Node, relaid: Mapping[Node, Any], copied: set[Node]) -> set[Node] | None:
    """The elementwise nodes (of ``output``'s shape) between a row-major graph output and
    its operands, when every full-size operand is a relaid convolution's result or a
    convolution's input (copied channels-last anyway) and one is a convolution's result:
    computed channels-last, all its loads are contiguous. None otherwise."""
    meta = output.meta
    if not isinstance(meta, TensorMeta) or len(meta.shape) != 4 or not _elementwise(output):
        return None
    if not all(type(size) is int for size in meta.shape):
        return None
    if meta.strides != contiguous_strides(meta.shape):
        return None
    chain: set[Node] = set()
    convs = 0
    stack = [output]
    while stack:
        node = stack.pop()
        if node in chain:
            continue
        if node in relaid:
            convs += 1
            continue
        if node in copied:
            continue
        node_meta = node.meta
        if not isinstance(node_meta, TensorMeta):
            return None
        if node.op == _BROADCAST and isinstance(node.args[0], Node):
            if node.args[0].tensor_meta.numel < node_meta.numel:
                continue  # a per-channel value: a load along the row, not the domain
            return None
        if node_meta.shape != meta.shape or not _elementwise(node):
            return None
        chain.add(node)
        stack.extend(node.input_nodes())
    return chain if convs else None


class _ChannelsLast(Transformer):
    def __init__(self, graph: Graph, relaid: dict[Node, tuple[int, ...]]) -> None:
        super().__init__(graph)
        self.relaid = relaid
        self.copies: dict[tuple[Node, tuple[int, ...]], Node] = {}
        self.copied = {conv.args[0] for conv in relaid}
        self.chains: set[Node] = set()
        for output in set(graph.outputs):
            chain = _output_chain(output, relaid, self.copied)
            if chain is not None:
                self.chains |= chain

    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        if node in self.chains:
            return self._in_chain(node, args, kwargs)
        result_strides = self.relaid.get(node)
        if result_strides is None or node.op is None:
            return super().transform_node(node, args, kwargs)
        x = self._channels_last(args[0], f"{node.name}_input")
        weight = self._channels_last(args[1], f"{node.name}_weight")
        meta = attrs.evolve(node.tensor_meta, strides=result_strides)
        with self.builder.tagged(node.tags):
            return self.builder.call(
                node.op, x, weight, *args[2:], meta=meta, name=node.name, **kwargs
            )

    def _in_chain(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        """A node between a channels-last convolution and a graph output: it reads the
        channels-last copies of convolution inputs. The output keeps the graph's layout:
        its kernel, whose full-size operands are all channels-last, walks them in that
        order and stores the output across its short channel dim (decision 0370)."""
        args = tuple(
            self._channels_last(new, f"{old.name}_channels_last") if old in self.copied else new
            for old, new in zip(node.args, args, strict=True)
        )
        return super().transform_node(node, args, kwargs)

    def _channels_last(self, value: Node, name: str) -> Node:
        """``value`` copied into channels-last (itself when it is laid out so already)."""
        meta: TensorMeta = value.tensor_meta
        strides = channels_last_strides(meta.shape)
        if same_layout(meta.shape, meta.strides, strides):
            return value
        key = (value, strides)
        if key not in self.copies:  # one copy of a value two convolutions read
            copy_meta = attrs.evolve(meta, strides=strides)
            self.copies[key] = self.builder.call(_MUL, value, 1, meta=copy_meta, name=name)
        return self.copies[key]


def _stored_channels_last(
    conv: Node, candidates: Mapping[Node, Any], readers: Mapping[Node, Sequence[Node]], outputs
) -> bool:
    """Whether every value stored from ``conv``'s result is stored channels-last: it flows
    through elementwise prims only into the inputs of convolutions run channels-last and
    into graph outputs computed channels-last. A value stored row-major from it (the
    operand of a max pool, a reduction's rows) would be written by a kernel that loads
    across the channels-last rows, scalar here: a ResNet-18 stem's ReLU before its max
    pool took 5.8 ms that way."""
    copied = {node.args[0] for node in candidates}
    seen, stack = set(), [conv]
    while stack:
        value = stack.pop()
        if value in seen:
            continue
        seen.add(value)
        if value in outputs and _output_chain(value, candidates, copied) is None:
            return False
        for reader in readers.get(value, ()):
            if reader in candidates and reader.args[0] is value:
                if value in reader.args[1:]:
                    return False
                continue
            if not _elementwise(reader):
                return False
            stack.append(reader)
    return True


def channels_last_convolutions(graph: Graph) -> Graph:
    """``graph`` with its CPU 2-D convolutions run on channels-last inputs where ATen's
    backend gives channels-last results and every value stored from them can be stored
    channels-last (see the module docstring)."""
    readers: dict[Node, list[Node]] = {}
    for node in graph.nodes:
        for source in node.input_nodes():
            readers.setdefault(source, []).append(node)
    outputs = frozenset(graph.outputs)
    relaid = {}
    for node in graph.nodes:
        layouts = _relaid_result(node, readers.get(node, ()), outputs)
        if layouts is not None:
            relaid[node] = layouts
    changed = True
    while changed:  # a convolution left row-major is no channels-last sink for the others
        changed = False
        for conv in list(relaid):
            if not _stored_channels_last(conv, relaid, readers, outputs):
                del relaid[conv]
                changed = True
    if not relaid:
        return graph
    return _ChannelsLast(graph, relaid).run()
