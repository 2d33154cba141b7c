"""Functionalization: input mutations become write-backs, views are regenerated, and
outputs that alias inputs are reported."""

from __future__ import annotations

import operator

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, torch_op

F64 = torch.float64
T = torch.Tensor


def _builder(**inputs):
    b = GraphBuilder(Level.TORCH)
    nodes = [
        b.input(name, TensorMeta(shape, F64, requires_grad=grad))
        for name, (shape, grad) in inputs.items()
    ]
    return b, nodes


def _call(b, fn, *args, **kwargs):
    return b.call(torch_op(fn), *args, **kwargs)


def _randn(graph, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(m.shape, generator=generator, dtype=m.dtype) for m in graph.input_metas]


def _no_inplace_ops(graph):
    names = [op.name.split(".")[1] for op in graph.ops() if op.name.startswith("aten.")]
    assert not [name for name in names if name.endswith("_") and not name.startswith("_")]


def test_inplace_on_an_input_becomes_a_write_back(aot):
    b, (x, y) = _builder(x=((3, 4), False), y=((4,), False))
    _call(b, T.add_, x, 1)
    _call(b, T.mul_, x, y)
    graph = b.build([_call(b, operator.mul, x, 2)])
    result = aot.check_training(graph, _randn(graph))
    assert result.mutated_inputs == (0,)
    assert len(result.forward.outputs) == 2
    _no_inplace_ops(result.forward)


@pytest.mark.parametrize(
    "how", ["select", "transpose", "view_slice", "split", "diagonal", "setitem", "copy"]
)
def test_mutation_through_a_view_of_an_input(aot, how):
    b, (x, y) = _builder(x=((4, 4), False), y=((4,), False))
    if how == "select":
        _call(b, T.mul_, _call(b, T.select, x, 0, 1), 2)
    elif how == "transpose":
        _call(b, T.add_, _call(b, T.t, x), y)
    elif how == "view_slice":
        flat = _call(b, T.view, x, -1)
        _call(b, T.fill_, _call(b, operator.getitem, flat, slice(2, 9, 3)), 0.5)
    elif how == "split":
        parts = _call(b, torch.split, x, 3, 1)
        _call(b, T.sub_, b.getitem(parts, 1), 1.0)
    elif how == "setitem":
        _call(b, operator.setitem, x, (slice(None), 1), y)
    elif how == "copy":
        _call(
            b,
            T.copy_,
            _call(b, T.unsqueeze, _call(b, T.view, x, 2, 8), 0),
            _call(b, T.repeat, y, 2),
        )
    else:
        _call(b, T.zero_, _call(b, torch.diagonal, x))
    graph = b.build([_call(b, torch.sum, x, 0)])
    result = aot.check_training(graph, _randn(graph))
    assert result.mutated_inputs == (0,)
    _no_inplace_ops(result.forward)


def test_reading_the_base_after_writing_its_view(aot):
    b, (x,) = _builder(x=((2, 3), False))
    base = _call(b, operator.add, x, 1)
    view = _call(b, T.view, base, 6)
    _call(b, T.mul_, view, 2)
    graph = b.build([base, _call(b, operator.add, view, 0)])
    result = aot.check_training(graph, _randn(graph))
    assert result.mutated_inputs == ()


def test_reading_a_view_after_writing_its_base(aot):
    b, (x,) = _builder(x=((3, 4), False))
    base = _call(b, operator.mul, x, 3)
    row = _call(b, T.select, base, 0, 1)
    col = _call(b, T.transpose, base, 0, 1)
    _call(b, T.add_, base, 1)
    _call(b, T.mul_, row, 10)  # writes through the regenerated view
    graph = b.build([_call(b, operator.mul, col, 1), base, row])
    aot.check_training(graph, _randn(graph))


def test_outputs_that_alias_inputs_are_reported(aot):
    b, (x, y) = _builder(x=((3, 4), False), y=((3, 4), False))
    t = _call(b, T.t, x)
    tail = _call(b, operator.getitem, y, (slice(1, None), slice(None, None, 2)))
    graph = b.build([t, tail, x, _call(b, operator.add, x, y)])
    result = aot.check_training(graph, _randn(graph))
    assert result.output_aliases == (
        (0, (4, 3), (1, 4), 0),
        (1, (2, 2), (4, 2), 4),
        (0, (3, 4), (4, 1), 0),
        None,
    )


def test_view_of_a_mutated_input_is_returned_after_the_write_back(aot):
    b, (x,) = _builder(x=((2, 5), False))
    _call(b, T.add_, x, 1)
    graph = b.build([_call(b, T.t, x)])
    result = aot.check_training(graph, _randn(graph))
    assert result.mutated_inputs == (0,)
    assert result.output_aliases[0] == (0, (5, 2), (1, 5), 0)


def test_buffer_update_beside_a_training_graph(aot):
    b, (x, w, ema, count) = _builder(
        x=((4, 3), True), w=((3, 3), True), ema=((3, 3), False), count=((), False)
    )
    _call(b, T.add_, count, 1)
    _call(b, T.add_, _call(b, T.mul_, ema, 0.9), _call(b, operator.mul, _call(b, T.detach, w), 0.1))
    graph = b.build([_call(b, torch.tanh, _call(b, operator.matmul, x, w))])
    result = aot.check_training(graph, _randn(graph))
    assert result.mutated_inputs == (2, 3)
    assert result.grad_inputs == (0, 1)


def test_inplace_on_a_view_of_an_intermediate_that_requires_grad(aot):
    b, (x,) = _builder(x=((3, 4), True))
    y = _call(b, operator.mul, x, 2)
    row = _call(b, T.select, y, 0, 1)
    # core's meta inference runs torch ops on meta leaves, where in-place ops refuse grad
    _call(b, T.mul_, row, 3, meta=row.meta)
    _call(b, T.sigmoid_, y, meta=y.meta)
    graph = b.build([_call(b, operator.mul, y, x)])
    result = aot.check_training(graph, _randn(graph))
    _no_inplace_ops(result.forward)
    _no_inplace_ops(result.backward)


def test_saved_input_that_is_later_mutated_is_saved_as_a_clone(aot):
    b, (x, w) = _builder(x=((3, 4), False), w=((3, 4), True))
    # eager saves x * 2; we would rather save x and recompute, but x is written below
    y = _call(b, operator.mul, _call(b, operator.mul, x, 2.0), w)
    _call(b, T.add_, x, 5.0)
    graph = b.build([_call(b, torch.sin, y)])
    result = aot.check_training(graph, _randn(graph))
    assert result.mutated_inputs == (0,)
    saved = result.forward.outputs[result.num_user_outputs + result.num_mutations :]
    assert result.forward.inputs[0] not in saved
    assert any(node.op is not None and node.op.name == "aten.clone.default" for node in saved)


def test_in_place_view_ops_on_an_intermediate(aot):
    # the tensor becomes its own view; a write through it reaches the base and the
    # view taken before
    b, (x,) = _builder(x=((3, 4), True))
    z = _call(b, operator.mul, x, 2)
    row = _call(b, T.select, z, 0, 1)
    _call(b, T.unsqueeze_, z, 0)
    _call(b, T.mul_, z, 3)
    _call(b, T.squeeze_, z, 0)
    _call(b, T.t_, z)
    _call(b, T.transpose_, z, 0, 1)
    graph = b.build([_call(b, operator.add, z, 1), _call(b, operator.mul, row, 1)])
    result = aot.check_training(graph, _randn(graph))
    _no_inplace_ops(result.forward)


def test_an_in_place_view_op_on_an_input_is_refused(aot):
    b, (x,) = _builder(x=((3, 4), False))
    _call(b, T.unsqueeze_, x, 0)
    graph = b.build([_call(b, operator.mul, x, 2)])
    with pytest.raises(NotImplementedError, match="graph input"):
        aot.check_training(graph, _randn(graph))


def test_outputs_that_view_another_output_are_reported(aot):
    b, (x,) = _builder(x=((3, 4), False))
    z = _call(b, operator.mul, x, 2)
    row = _call(b, T.select, z, 0, 1)
    col = _call(b, T.t, z)
    other = _call(b, operator.add, x, 1)
    graph = b.build([row, z, col, other, _call(b, T.select, other, 1, 0)])
    result = aot.check_training(graph, _randn(graph))
    assert result.output_views == (
        (1, (4,), (1,), 4),
        None,
        (1, (4, 3), (1, 4), 0),
        None,
        (3, (3,), (4,), 0),
    )


def test_resize_is_not_traced_as_a_view(aot):
    # resize_ may move its tensor to new memory: views taken before no longer alias it
    b, (x,) = _builder(x=((3, 4), False))
    z = _call(b, operator.mul, x, 2)
    _call(b, T.resize_, z, [2, 2])
    graph = b.build([_call(b, operator.add, z, 1)])
    with pytest.raises(NotImplementedError, match="no view counterpart"):
        aot.check_training(graph, _randn(graph))


def test_a_buffer_written_from_a_value_that_requires_grad_gets_a_tangent(aot):
    b, (cache, x, w) = _builder(cache=((5, 3), False), x=((2, 3), False), w=((3, 3), True))
    k = _call(b, torch.tanh, _call(b, operator.matmul, x, w))
    _call(b, T.index_copy_, cache, 0, _call(b, torch.arange, 2, 4), k)
    graph = b.build([_call(b, operator.mul, x, 2.0)])
    result = aot.check_training(graph, _randn(graph))
    assert result.mutated_inputs == (0,)
    # the user output needs no gradient; the written buffer's new value does
    assert result.tangent_outputs == (1,)
    assert result.grad_inputs == (2,)


def test_an_input_that_requires_grad_is_written_in_place(aot):
    b, (cache, w) = _builder(cache=((4, 3), True), w=((3,), True))
    _call(b, T.mul_, _call(b, T.select, cache, 0, 1), w)
    graph = b.build([_call(b, operator.mul, cache, 3.0)])
    result = aot.check_training(graph, _randn(graph))
    assert result.mutated_inputs == (0,)
    assert result.tangent_outputs == (0, 1)
    # the gradient reaches the written input's old value, and the parameter
    assert result.grad_inputs == (0, 1)


def test_a_write_without_autograd_history_is_a_plain_write_back(aot):
    b, (w, x) = _builder(w=((3,), True), x=((3,), True))
    _call(b, T.mul_, _call(b, T.detach, w), 0.5)
    graph = b.build([_call(b, operator.mul, w, x)])
    result = aot.check_training(graph, _randn(graph))
    assert result.mutated_inputs == (0,)
    assert result.tangent_outputs == (0,)  # the user output only
