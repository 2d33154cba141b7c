"""CPU convolutions on channels-last operands (decision 0230).

ATen's CPU convolution (oneDNN) works in a blocked channels-last form: a row-major
``[N, C, H, W]`` input is reordered into it and the result reordered back on every
call, a channels-last input is read as it is and gives a channels-last result. For a
2-D convolution whose input is row-major, the input and the weight are copied into
channels-last by kernels (``prims.mul(x, 1)`` stored channels-last: a computed input,
e.g. the batch norm and ReLU before the next convolution, is stored that way by the
kernel that computes it, at no extra cost; a row-major weight would otherwise be copied
by ATen's ``contiguous`` in every call) and the convolution's result is recorded
channels-last; the pointwise kernels after it read it in that layout, and a graph output
keeps its own layout (the last kernel writes it). torch.compile's CPU layout
optimisation does the same (M4's ResNet block: 0.84x of torch.compile before).

A convolution is left alone unless ATen's backend selection, asked about the
channels-last operands, answers channels-last, and unless every reader of its result is
an elementwise or reduction prim (a view's or an extern op's recorded strides would no
longer describe it) and the result is no graph output (the caller gets eager's layout).
"""

from __future__ import annotations

from collections.abc import Sequence
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
    is_dense,
    prim,
    same_layout,
)

_CONVOLUTION = "aten.convolution.default"
_MUL = prim("mul")
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
    x, weight, bias, stride, padding, dilation, transposed, output_padding, groups = node.args
    x_meta, w_meta = x.tensor_meta, weight.tensor_meta
    try:
        cpu_x = torch.empty_strided(
            x_meta.shape, channels_last_strides(x_meta.shape), dtype=x_meta.dtype
        )
        cpu_w = torch.empty_strided(
            w_meta.shape, channels_last_strides(w_meta.shape), dtype=w_meta.dtype
        )
        cpu_b = None
        if isinstance(bias, Node):
            cpu_b = torch.empty(bias.tensor_meta.shape, dtype=bias.tensor_meta.dtype)
        backend = torch._C._select_conv_backend(
            cpu_x,
            cpu_w,
            cpu_b,
            list(stride),
            list(padding),
            list(dilation),
            bool(transposed),
            list(output_padding),
            int(groups),
            None,
        )
        layout = torch._C._conv_determine_backend_memory_format(cpu_x, cpu_w, backend)
    except (AttributeError, RuntimeError, TypeError, ValueError):  # not askable here
        return None
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


class _ChannelsLast(Transformer):
    def __init__(self, graph: Graph, relaid: dict[Node, tuple[int, ...]]) -> None:
        super().__init__(graph)
        self.relaid = relaid
        self.copies: dict[tuple[Node, tuple[int, ...]], Node] = {}

    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
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

    def _channels_last(self, value: Node, name: str) -> Node:
        """``value`` copied into channels-last (itself when it is laid out so already)."""
        meta: TensorMeta = value.tensor_meta
        strides = channels_last_strides(meta.shape)
        if same_layout(meta.shape, meta.strides, strides):
            return value
        key = (value, strides)
        if key not in self.copies:  # one copy of a weight two convolutions read
            copy_meta = attrs.evolve(meta, strides=strides)
            self.copies[key] = self.builder.call(_MUL, value, 1, meta=copy_meta, name=name)
        return self.copies[key]


def channels_last_convolutions(graph: Graph) -> Graph:
    """``graph`` with its CPU 2-D convolutions run on channels-last inputs where ATen's
    backend gives channels-last results (see the module docstring)."""
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
    if not relaid:
        return graph
    return _ChannelsLast(graph, relaid).run()
