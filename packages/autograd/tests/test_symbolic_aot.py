"""One joint trace for every size (decision 0220): ``aot_symbolic`` of a graph with
symbolic sizes, made static at a size, gives what ``aot`` gives for the graph made static
at that size; a size that violates a condition the trace relied on is refused, and the
capture's ShapeEnv is left as it was."""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F

from torchstrata.autograd import aot, aot_symbolic
from torchstrata.core import (
    GraphBuilder,
    Level,
    SizeOutsideTrace,
    SymbolicSizes,
    concretize_graph,
    has_symbols,
    input_meta,
    interpret,
    symbolic_scope,
    torch_op,
)


def _call(builder, fn, *args, **kwargs):
    return builder.call(torch_op(fn), *args, **kwargs)


def _mlp_loss(requires_grad: bool):
    """``x [n, 16]`` through a linear layer, GELU, LayerNorm and softmax; the mean as
    the loss. ``n`` symbolic."""
    sizes = SymbolicSizes({"L['x']": [0]})
    builder = GraphBuilder(Level.TORCH)
    with symbolic_scope(sizes):
        x = builder.input("x", input_meta("L['x']", torch.randn(6, 16)))
        w = builder.input(
            "w", input_meta("L['w']", torch.randn(8, 16, requires_grad=requires_grad))
        )
        b = builder.input("b", input_meta("L['b']", torch.randn(8, requires_grad=requires_grad)))
        h = _call(builder, F.gelu, _call(builder, F.linear, x, w, b))
        h = _call(builder, F.layer_norm, h, (8,))
        h = _call(builder, torch.softmax, h, -1)
        loss = _call(builder, torch.mean, _call(builder, torch.mul, h, h))
        graph = builder.build([loss, h])
    return sizes, graph


def _symbol(sizes):
    (binding,) = sizes.bindings
    return binding.name


def _outputs_and_grads(result, inputs, tangents):
    """The user outputs of ``result``'s forward and, for training, its backward's
    gradients for ``tangents`` (one per tangent output)."""
    outputs = interpret(result.forward, *inputs)
    users = list(outputs[: result.num_user_outputs])
    if result.backward is None:
        return users
    end = len(outputs) - result.num_unit_grads
    saved = outputs[end - result.num_saved : end]
    return users + list(interpret(result.backward, *saved, *tangents))


@pytest.mark.parametrize("requires_grad", [False, True], ids=["inference", "training"])
def test_one_trace_serves_every_size(requires_grad):
    sizes, graph = _mlp_loss(requires_grad)
    symbol = _symbol(sizes)
    traced = aot_symbolic(graph)
    assert traced.guards == ()
    assert traced.result is not None, "the symbolic joint graph was not partitioned once"
    for n in (6, 7, 2, 33, 5, 128, 3, 17):
        want = aot(concretize_graph(graph, {symbol: n}))
        got = traced.at({symbol: n})
        assert (got.num_user_outputs, got.grad_inputs, got.tangent_outputs) == (
            want.num_user_outputs,
            want.grad_inputs,
            want.tangent_outputs,
        )
        inputs = [torch.randn(n, 16, dtype=torch.float32), torch.randn(8, 16), torch.randn(8)]
        tangents = [torch.randn(()), torch.randn(n, 8)]
        for a, b in zip(
            _outputs_and_grads(got, inputs, tangents),
            _outputs_and_grads(want, inputs, tangents),
            strict=True,
        ):
            torch.testing.assert_close(a, b)


def test_the_partition_runs_once_for_every_size(monkeypatch):
    aot_module = importlib.import_module("torchstrata.autograd.aot")  # the name is the function
    calls = []
    real = aot_module.partition

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(aot_module, "partition", counted)
    sizes, graph = _mlp_loss(True)
    symbol = _symbol(sizes)
    traced = aot_symbolic(graph)
    results = [traced.at({symbol: n}) for n in (6, 7, 2, 33, 5)]
    assert len(calls) == 1
    # every size's graphs are the one symbolic partition made static: the same cut
    assert {result.num_saved for result in results} == {traced.result.num_saved}
    assert str(results[0].forward) == str(concretize_graph(traced.result.forward, {symbol: 6}))


def test_the_partition_prices_sizes_at_the_traces_hints():
    # the cut's byte costs read the hints: no condition on sizes comes from the partition
    sizes, graph = _mlp_loss(True)
    symbol = _symbol(sizes)
    for hint in (6, 300):
        traced = aot_symbolic(graph, hints={symbol: hint})
        assert traced.guards == ()
        assert traced.violated({symbol: 1000}) == ""


def test_a_partition_that_fails_on_symbolic_sizes_runs_per_size(monkeypatch):
    import torchstrata.autograd.symbolic as symbolic_module

    sizes, graph = _mlp_loss(True)
    symbol = _symbol(sizes)
    real = symbolic_module.aot_from_trace

    def refuses_symbols(trace, options=None):
        if has_symbols([n.tensor_meta.shape for n in trace.graph.inputs]):
            raise NotImplementedError("no symbolic sizes here")
        return real(trace, options)

    monkeypatch.setattr(symbolic_module, "aot_from_trace", refuses_symbols)
    traced = aot_symbolic(graph)
    assert traced.result is None
    for n in (6, 33):
        want = aot(concretize_graph(graph, {symbol: n}))
        assert str(traced.at({symbol: n}).backward) == str(want.backward)


def test_the_trace_leaves_the_capture_shape_env_alone():
    sizes, graph = _mlp_loss(True)
    before = (sizes.guard_exprs(), dict(sizes.shape_env.replacements))
    aot_symbolic(graph)
    assert (sizes.guard_exprs(), dict(sizes.shape_env.replacements)) == before


def test_a_size_outside_the_traces_conditions_is_refused():
    # a convolution's CPU backend choice reads the batch size: the trace records it
    sizes = SymbolicSizes({"L['x']": [0, 2]})
    builder = GraphBuilder(Level.TORCH)
    with symbolic_scope(sizes):
        x = builder.input("x", input_meta("L['x']", torch.randn(3, 3, 9)))
        w = builder.input("w", input_meta("L['w']", torch.randn(4, 3, 3, requires_grad=True)))
        out = _call(builder, F.conv1d, x, w, padding=1)
        graph = builder.build([_call(builder, torch.sum, out)])
    batch, length = (binding.name for binding in sizes.bindings)
    traced = aot_symbolic(graph)
    assert traced.guards, "the trace relied on no condition: pick another op for this test"
    inside = {batch: 5, length: 11}
    assert traced.violated(inside) == ""
    want = aot(concretize_graph(graph, inside))
    assert str(traced.at(inside).backward) == str(want.backward)
    outside = {batch: 20, length: 11}
    assert traced.violated(outside)
    assert not traced.specialised(outside)
    with pytest.raises(SizeOutsideTrace, match="violate"):
        traced.at(outside)
    # a trace whose decisions are taken for the outside sizes serves them
    again = aot_symbolic(graph, hints=outside)
    assert again.violated(outside) == ""
    assert again.violated(inside)
    assert str(again.at(outside).backward) == str(aot(concretize_graph(graph, outside)).backward)


@pytest.mark.gpu
def test_one_trace_serves_every_size_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    sizes = SymbolicSizes({"L['x']": [0]})
    builder = GraphBuilder(Level.TORCH)
    with symbolic_scope(sizes):
        x = builder.input("x", input_meta("L['x']", torch.randn(6, 16, device="cuda")))
        w = builder.input(
            "w", input_meta("L['w']", torch.randn(8, 16, device="cuda", requires_grad=True))
        )
        h = _call(builder, torch.softmax, _call(builder, F.linear, x, w), -1)
        graph = builder.build([_call(builder, torch.mean, _call(builder, torch.mul, h, h))])
    symbol = _symbol(sizes)
    traced = aot_symbolic(graph)
    for n in (6, 7, 2, 33, 5, 128, 3, 17):
        want = aot(concretize_graph(graph, {symbol: n}))
        got = traced.at({symbol: n})
        inputs = [torch.randn(n, 16, device="cuda"), torch.randn(8, 16, device="cuda")]
        tangents = [torch.randn((), device="cuda")]
        for a, b in zip(
            _outputs_and_grads(got, inputs, tangents),
            _outputs_and_grads(want, inputs, tangents),
            strict=True,
        ):
            torch.testing.assert_close(a, b)
