"""The ``torchstrata_aot`` hook, found through the ``torchstrata`` entry point."""

from __future__ import annotations

import importlib.metadata
import operator

import torch

from torchstrata.core import (
    ENTRY_POINT_GROUP,
    AotResult,
    CompileOptions,
    GraphBuilder,
    Level,
    TensorMeta,
    create_plugin_manager,
    torch_op,
)


def _graph(requires_grad: bool = False):
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta((4, 8), torch.float32, requires_grad=requires_grad))
    y = b.input("y", TensorMeta((8,), torch.float32))
    return b.build([b.call(torch_op(torch.softmax), b.call(torch_op(operator.add), x, y), -1)])


def _manager():
    """A manager holding only this stage, loaded through its entry point.

    Other stages' entry points are left out so that this package is tested alone.
    """
    points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name="autograd")
    (point,) = points
    assert point.value == "torchstrata.autograd.plugin"
    return create_plugin_manager(load_entrypoints=False, plugins=[("autograd", point.load())])


def test_entry_point_registers_the_hook():
    manager = _manager()
    assert manager.get_plugin("autograd") is not None
    result = manager.hook.torchstrata_aot(graph=_graph(), options=CompileOptions(debug=True))
    assert isinstance(result, AotResult)
    assert [op.name for op in result.forward.ops()] == ["aten.add.Tensor", "aten._softmax.default"]


def test_hook_traces_training_graphs_with_a_backward():
    manager = _manager()
    result = manager.hook.torchstrata_aot(
        graph=_graph(requires_grad=True), options=CompileOptions(debug=True)
    )
    assert result.backward is not None
    assert result.grad_inputs == (0,)
    assert result.tangent_outputs == (0,)
    assert "aten._softmax_backward_data.default" in [op.name for op in result.backward.ops()]
