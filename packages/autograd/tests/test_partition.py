"""The min-cut partitioner: what it saves and what it recomputes."""

from __future__ import annotations

import operator

import torch

from torchstrata.autograd import choose_saved, is_recomputable, partition, trace_graph
from torchstrata.autograd.expand import spell_out_softmax
from torchstrata.core import GraphBuilder, Level, TensorMeta, torch_op


def _graph(build):
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta((8, 8), torch.float32, requires_grad=True))
    w = b.input("w", TensorMeta((8, 8), torch.float32, requires_grad=True))
    return b.build([build(b, x, w)])


def _call(b, fn, *args):
    return b.call(torch_op(fn), *args)


def test_pointwise_chain_saves_only_its_input():
    graph = _graph(lambda b, x, w: _call(b, torch.cos, _call(b, torch.exp, _call(b, torch.sin, x))))
    trace = trace_graph(graph, training=True)
    saved = choose_saved(trace)
    assert [node.name for node in saved] == ["x"]
    parts = partition(trace, saved)
    names = [op.name for op in parts.backward.ops()]
    assert "aten.sin.default" in names and "aten.exp.default" in names  # recomputed


def test_matmul_output_is_saved_not_recomputed():
    # sin's backward reads its input, the matmul (tanh's would read its returned result)
    graph = _graph(lambda b, x, w: _call(b, torch.sin, _call(b, operator.matmul, x, w)))
    parts = partition(trace_graph(graph, training=True))
    assert "aten.mm.default" in [node.op.name for node in parts.saved if node.op is not None]
    tangent = parts.backward.inputs[-1]
    for node in parts.backward.nodes:  # every backward matmul reads the tangent's chain
        if node.op.name == "aten.mm.default":
            assert _depends_on(node, tangent)
    assert not is_recomputable(next(n for n in parts.saved if n.op is not None))


def _depends_on(node, target):
    stack, seen = [node], set()
    while stack:
        current = stack.pop()
        if current is target:
            return True
        if current not in seen:
            seen.add(current)
            stack.extend(current.input_nodes())
    return False


def test_a_returned_value_is_saved_rather_than_the_inputs_it_is_built_from():
    """``h = x + w`` is returned and ``sin(h)``'s backward reads it: the caller holds
    ``h`` anyway, so the forward saves it, and the backward reads one tensor instead of
    recomputing it from two (residual + LayerNorm training, K6)."""

    def build(b, x, w):
        h = _call(b, operator.add, x, w)
        return h, _call(b, torch.sin, h)

    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta((8, 8), torch.float32, requires_grad=True))
    w = b.input("w", TensorMeta((8, 8), torch.float32, requires_grad=True))
    graph = b.build(list(build(b, x, w)))
    parts = partition(trace_graph(graph, training=True))
    assert [node.op.name if node.op else node.name for node in parts.saved] == ["aten.add.Tensor"]


def test_backward_inputs_are_saved_values_then_tangents():
    graph = _graph(lambda b, x, w: _call(b, operator.mul, x, w))
    trace = trace_graph(graph, training=True)
    parts = partition(trace)
    names = [node.name for node in parts.backward.inputs]
    assert names == [*(node.name for node in parts.saved), "tangent_0"]
    assert len(parts.backward.outputs) == 2


def test_cross_entropy_saves_row_statistics_not_the_float_log_softmax():
    import torch.nn.functional as F

    b = GraphBuilder(Level.TORCH)
    logits = b.input("logits", TensorMeta((8, 64), torch.bfloat16, requires_grad=True))
    target = b.input("target", TensorMeta((8,), torch.int64))
    upcast = b.call(torch_op(torch.Tensor.float), logits)
    graph = b.build([_call(b, F.cross_entropy, upcast, target)])
    parts = partition(spell_out_softmax(trace_graph(graph, training=True)))
    shapes = {node.name: tuple(node.meta.shape) for node in parts.saved}
    assert "logits" in shapes
    # Besides the logits, only row statistics ([8, 1]) and scalars are saved.
    assert all(shape in ((8, 1), (8,), ()) for name, shape in shapes.items() if name != "logits")
    ops = [op.name for op in parts.backward.ops()]
    assert "aten._log_softmax.default" not in ops and "aten.amax.default" not in ops
    assert "aten.log.default" in ops  # the log-softmax is rebuilt pointwise from the stats


def test_softmax_of_an_empty_row_is_left_whole():
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta((3, 0), torch.float32, requires_grad=True))
    graph = b.build([_call(b, torch.softmax, x, -1)])
    trace = spell_out_softmax(trace_graph(graph, training=True))
    assert "aten._softmax.default" in [op.name for op in trace.graph.ops()]


def test_float32_cross_entropy_recomputes_from_its_input():
    import torch.nn.functional as F

    b = GraphBuilder(Level.TORCH)
    logits = b.input("logits", TensorMeta((8, 64), torch.float32, requires_grad=True))
    target = b.input("target", TensorMeta((8,), torch.int64))
    graph = b.build([_call(b, F.cross_entropy, logits, target)])
    parts = partition(spell_out_softmax(trace_graph(graph, training=True)))
    full = [node.name for node in parts.saved if tuple(node.meta.shape) == (8, 64)]
    assert full == ["logits"]  # not the same-size float32 log-softmax


def test_an_index_vector_is_recomputed_not_saved():
    # cross-entropy spelled out: where(arange == target, x, 0).sum(-1); the backward needs
    # the arange again, and recomputing it reads nothing
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta((8, 64), torch.float32, requires_grad=True))
    target = b.input("target", TensorMeta((8,), torch.int64))
    idx = _call(b, torch.arange, 64)
    hit = _call(
        b, operator.eq, _call(b, torch.unsqueeze, idx, 0), _call(b, torch.unsqueeze, target, 1)
    )
    graph = b.build([_call(b, torch.sum, _call(b, torch.where, hit, x, 0.0))])
    parts = partition(trace_graph(graph, training=True))
    assert not any("arange" in str(node.op) for node in parts.saved)
    assert any("arange" in op.name for op in parts.backward.ops())


def test_a_reduction_only_the_backward_needs_runs_in_the_forward():
    # log-sum-exp with its max: amax's backward divides by the count of maxima,
    # sum(x == max(x)), which reads no tangent. Computed in the backward it walks the
    # rows again; in the forward it shares the walk that finds the max.
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta((8, 64), torch.float32, requires_grad=True))
    peak = _call(b, torch.amax, x, -1, True)
    total = _call(b, torch.sum, _call(b, torch.exp, _call(b, operator.sub, x, peak)), -1)
    graph = b.build([_call(b, torch.log, total)])
    parts = partition(trace_graph(graph, training=True))
    counts = [
        n for n in parts.saved if n.op is not None and n.args[0].tensor_meta.dtype == torch.bool
    ]
    assert [n.op.name for n in counts] == ["aten.sum.dim_IntList"]
    tangent = parts.backward.inputs[-1]
    for node in parts.backward.nodes:  # what cannot be recomputed reads the tangent
        if not is_recomputable(node):
            assert _depends_on(node, tangent), node


def test_inputs_read_by_as_strided_are_listed_for_their_storage_offset():
    """``as_strided``'s storage offset is absolute: its gradient depends on where the
    input starts in its storage, which a trace from metadata takes to be 0."""
    from torchstrata.autograd.offsets import offset_inputs
    from torchstrata.core import aten

    b = GraphBuilder(Level.ATEN)
    x = b.input("x", TensorMeta((3, 3), torch.float32))
    y = b.input("y", TensorMeta((3, 3), torch.float32))
    window = b.call(aten("as_strided.default"), b.call(aten("t.default"), x), [2, 2], [1, 2], 0)
    plain = b.call(aten("mul.Tensor"), y, 2)
    graph = b.build([window, plain])
    assert offset_inputs(graph, num_primals=2) == (0,)


def test_cross_entropy_over_matmul_logits_saves_them_not_the_log_softmax():
    """Logits made in the graph (a tied head's matmul) are written by the forward anyway:
    the backward recomputes the log-softmax from them and the row statistics rather than
    the forward storing a second [rows, vocab] tensor."""
    import torch.nn.functional as F

    b = GraphBuilder(Level.TORCH)
    h = b.input("h", TensorMeta((8, 16), torch.float32, requires_grad=True))
    w = b.input("w", TensorMeta((64, 16), torch.float32, requires_grad=True))
    target = b.input("target", TensorMeta((8,), torch.int64))
    logits = _call(b, F.linear, h, w)
    graph = b.build([_call(b, F.cross_entropy, logits, target)])
    parts = partition(spell_out_softmax(trace_graph(graph, training=True)))
    full = [node for node in parts.saved if tuple(node.meta.shape) == (8, 64)]
    assert [node.op.name for node in full if node.op is not None] == ["aten.mm.default"]
    assert all(node.op is not None for node in full)  # no input of that shape exists
    rest = [tuple(node.meta.shape) for node in parts.saved if node not in full]
    assert all(shape in ((8, 1), (8,), (), (8, 16), (64, 16), (16, 64)) for shape in rest), rest
    ops = [op.name for op in parts.backward.ops()]
    assert "aten.amax.default" not in ops  # the statistics are saved ...
    assert "aten.log.default" in ops  # ... and the log-softmax rebuilt from them
    # priced like a pointwise value, the matmul's result loses to the log-softmax
    before = partition(spell_out_softmax(trace_graph(graph, training=True)), None, False)
    assert [n.op.name for n in before.saved if tuple(n.meta.shape) == (8, 64)] == [
        "aten.sub.Tensor"
    ]


def test_gathered_rows_are_not_priced_like_written_results():
    """An embedding's rows are gathered where they are read, not written by the forward:
    the sum of two embeddings is saved, not both of them."""
    import torch.nn.functional as F

    b = GraphBuilder(Level.TORCH)
    tok = b.input("tok", TensorMeta((32, 16), torch.float32, requires_grad=True))
    pos = b.input("pos", TensorMeta((8, 16), torch.float32, requires_grad=True))
    idx = b.input("idx", TensorMeta((8,), torch.int64))
    x = _call(b, operator.add, _call(b, F.embedding, idx, tok), _call(b, F.embedding, idx, pos))
    graph = b.build([_call(b, torch.sum, _call(b, torch.sin, x))])
    saved = partition(trace_graph(graph, training=True)).saved
    ops = [node.op.name for node in saved if node.op is not None]
    assert ops == ["aten.add.Tensor"], ops


def test_a_bias_less_linear_of_3d_input_saves_its_matmul_not_the_unsafe_view():
    """``_unsafe_view`` reshapes the matmul's result; saved itself, it was a copy kernel."""
    import torch.nn.functional as F

    b = GraphBuilder(Level.TORCH)
    h = b.input("h", TensorMeta((2, 4, 16), torch.float32, requires_grad=True))
    w = b.input("w", TensorMeta((64, 16), torch.float32, requires_grad=True))
    target = b.input("target", TensorMeta((8,), torch.int64))
    logits = _call(b, torch.Tensor.view, _call(b, F.linear, h, w), -1, 64)
    graph = b.build([_call(b, F.cross_entropy, logits, target)])
    parts = partition(spell_out_softmax(trace_graph(graph, training=True)))
    ops = [node.op.name for node in parts.saved if node.op is not None]
    assert "aten.mm.default" in ops and "aten._unsafe_view.default" not in ops, ops
    assert all(
        node.meta.numel < 8 * 64
        for node in parts.saved
        if node.op is not None and node.op.name != "aten.mm.default"
    )
