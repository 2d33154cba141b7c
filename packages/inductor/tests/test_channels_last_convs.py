"""CPU convolutions run on channels-last operands (``cpp.channels_last_convolutions``,
decision 0230): the operands are copied by kernels (a computed input stored channels-last
by the kernel that computes it), the result is read in that layout, outputs keep theirs."""

from __future__ import annotations

import torch

from torchstrata.core import Graph, GraphBuilder, Level, Node, TensorMeta, aten, prim
from torchstrata.inductor.passes.channels_last_convs import (
    channels_last_convolutions,
    channels_last_strides,
)

CONV = aten("convolution.default")
SHAPE = (2, 8, 10, 10)
WEIGHT = (8, 8, 3, 3)


def _conv(b: GraphBuilder, x: Node, w: Node) -> Node:
    return b.call(CONV, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)


def _block() -> Graph:
    """``relu(conv(relu(conv(x) * s + t)) + x)``: a ResNet block with eval batch norm."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(SHAPE, torch.float32))
    w1 = b.input("w1", TensorMeta(WEIGHT, torch.float32))
    w2 = b.input("w2", TensorMeta(WEIGHT, torch.float32))
    scale = b.input("scale", TensorMeta((8,), torch.float32))
    first = _conv(b, x, w1)
    per_channel = b.call(prim("broadcast_in_dim"), b.call(prim("rsqrt"), scale), list(SHAPE), [1])
    hidden = b.call(prim("maximum"), b.call(prim("mul"), first, per_channel), 0.0)
    second = _conv(b, hidden, w2)
    return b.build([b.call(prim("maximum"), b.call(prim("add"), second, x), 0.0)])


def _convs(graph: Graph) -> list[Node]:
    return [node for node in graph.nodes if node.op == CONV]


def test_operands_and_results_become_channels_last() -> None:
    """Both convolutions take channels-last copies of their input and weight (ATen would
    copy a row-major weight itself on every call) and give a channels-last result."""
    graph = _block()
    rewritten = channels_last_convolutions(graph)
    convs = _convs(rewritten)
    assert len(convs) == 2
    for conv in convs:
        x, weight = conv.args[0], conv.args[1]
        assert x.op == prim("mul") and x.args[1] == 1
        assert x.tensor_meta.strides == channels_last_strides(SHAPE)
        assert weight.op == prim("mul") and weight.args[0].is_input
        assert weight.tensor_meta.strides == channels_last_strides(WEIGHT)
        assert conv.tensor_meta.strides == channels_last_strides(SHAPE)
    # the output keeps the graph's layout; it reads the input's copy, not the input
    (output,) = rewritten.outputs
    assert output.tensor_meta.strides == (800, 100, 10, 1)
    residual = output.args[0]
    assert [arg.name for arg in residual.args] == ["convolution_1", "convolution_input"]


def test_output_is_stored_in_the_graphs_layout_walking_channels_last(ind) -> None:
    """The output's kernel walks its channels-last operands in their order (channels
    innermost: contiguous loads) and stores the output in the layout the graph promised,
    across its channels (decision 0370): no copy of the output by the launcher."""
    compiled = ind.compile(_block(), "cpp")
    assert "_restride(" not in compiled.launcher_source.splitlines()[-2]
    last = compiled.kernels[-1].source  # the row loop may be a function before the kernel's
    assert "buf_convolution_1[800*x0 + 80*x1 + 8*x2 + x3]" in last
    assert "[800*x0 + 10*x1 + x2 + 100*x3] =" in last  # stored row-major, channels x3
    args = [torch.randn(SHAPE), torch.randn(WEIGHT), torch.randn(WEIGHT), torch.rand(8) + 0.5]
    (out,) = compiled(*args)
    assert out.stride() == (800, 100, 10, 1)


def test_block_matches_the_interpreter_with_no_extra_kernel(ind) -> None:
    """Compiled with the rewrite, the block gives the interpreter's values in the graph's
    layout; the kernel between the convolutions stores the channels-last copy itself (one
    kernel: no separate copy of the hidden value), so the block has four kernels: the
    input's copy, the weights' copies (one horizontal kernel), the hidden value, the
    output (stored in the graph's layout)."""
    graph = _block()
    compiled = ind.check(graph, "cpp", seeds=(0, 1), rtol=1e-4, atol=1e-4)
    assert len(compiled.kernels) == 4


def test_aten_gives_the_recorded_layout() -> None:
    """ATen's CPU convolution of channels-last operands is channels-last, as recorded (the
    launcher would otherwise copy each result into the recorded strides)."""
    cl = torch.channels_last
    x, w = torch.randn(SHAPE).to(memory_format=cl), torch.randn(WEIGHT).to(memory_format=cl)
    result = torch.ops.aten.convolution.default(
        x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1
    )
    assert result.stride() == channels_last_strides(SHAPE)


def test_result_read_by_a_view_or_returned_is_left_alone() -> None:
    """A convolution whose result a view reads (its strides were derived from the
    row-major result) or that is a graph output keeps its layout."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(SHAPE, torch.float32))
    w = b.input("w", TensorMeta(WEIGHT, torch.float32))
    viewed = b.call(prim("reshape"), _conv(b, x, w), [2, 800])
    returned = _conv(b, x, w)
    graph = b.build([b.call(prim("exp"), viewed), returned])
    assert channels_last_convolutions(graph) is graph


def test_a_result_stored_row_major_keeps_the_convolution_row_major() -> None:
    """A value stored from the result for an op that is no channels-last convolution (a
    max pool, here any extern op; a reduction) would be written row-major from
    channels-last rows: the convolution stays as it is."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(SHAPE, torch.float32))
    w = b.input("w", TensorMeta(WEIGHT, torch.float32))
    hidden = b.call(prim("maximum"), _conv(b, x, w), 0.0)
    pooled = b.call(aten("max_pool2d_with_indices.default"), hidden, [2, 2], [2, 2])
    summed = b.call(prim("sum"), b.call(prim("exp"), _conv(b, x, w)), [2, 3])
    graph = b.build([b.getitem(pooled, 0), summed])
    assert channels_last_convolutions(graph) is graph


def test_channels_last_input_is_left_alone() -> None:
    """An input already channels-last runs so already: nothing to copy."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(SHAPE, torch.float32, strides=channels_last_strides(SHAPE)))
    w = b.input("w", TensorMeta(WEIGHT, torch.float32))
    graph = b.build([b.call(prim("exp"), _conv(b, x, w))])
    assert channels_last_convolutions(graph) is graph
