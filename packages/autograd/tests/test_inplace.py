"""In-place torch ops, constants, and the errors that name what is not supported yet."""

from __future__ import annotations

import operator

import pytest
import torch

from torchstrata.autograd import AotTraceError, aot_forward
from torchstrata.core import GraphBuilder, Level, TensorMeta, parse


def test_inplace_ops_on_intermediates_become_functional(aot):
    b, (x, y) = aot.builder(x=((4, 5), torch.float32), y=((5,), torch.float32))
    t = aot.call(b, operator.add, x, 1)
    aot.call(b, torch.Tensor.add_, t, y)
    aot.call(b, torch.Tensor.mul_, t, 2)
    forward = aot.check(b.build([t]))
    names = [op.name for op in forward.ops()]
    assert names == ["aten.add.Tensor", "aten.add.Tensor", "aten.mul.Tensor"]
    assert not any(name.endswith("_.Tensor") for name in names)


def test_inplace_result_keeps_self_dtype(aot):
    b, (x, d) = aot.builder(x=((3,), torch.float32), d=((3,), torch.float64))
    t = aot.call(b, torch.Tensor.clone, x)
    out = aot.call(b, torch.Tensor.add_, t, d)
    forward = aot.check(b.build([out, t]))
    assert forward.outputs[0].tensor_meta.dtype is torch.float32
    assert "aten._to_copy.default" in [op.name for op in forward.ops()]


def test_fill_copy_and_zero_on_intermediates(aot):
    b, (x, y) = aot.builder(x=((2, 3), torch.float32), y=((3,), torch.float32))
    t = aot.call(b, torch.Tensor.clone, x)
    aot.call(b, torch.Tensor.copy_, t, y)
    u = aot.call(b, torch.Tensor.clone, x)
    aot.call(b, torch.Tensor.fill_, u, 1.5)
    z = aot.call(b, torch.Tensor.clone, x)
    aot.call(b, torch.Tensor.zero_, z)
    aot.check(b.build([t, u, z]))


def test_inplace_on_a_view_then_output_the_view(aot):
    b, (x,) = aot.builder(x=((2, 3), torch.float32))
    t = aot.call(b, torch.Tensor.transpose, aot.call(b, operator.mul, x, 3), 0, 1)
    aot.call(b, torch.Tensor.sub_, t, 1)
    aot.check(b.build([t]))


def test_zero_dim_constant_tensor_becomes_scalar_tensor_node(aot):
    b, (x,) = aot.builder(x=((3,), torch.float32))
    c = aot.call(b, torch.tensor, 2.5)
    forward = aot.check(b.build([aot.call(b, operator.mul, x, c)]))
    assert forward.ops()[0].name == "aten.scalar_tensor.default"


def test_failing_torch_node_is_named():
    graph = parse(
        """
        graph torch {
          %x: f32[3] = input
          %y: f32[4] = input
          %bad: f32[3] = operator.add(%x, %y)
          return %bad
        }
        """
    )
    with pytest.raises(AotTraceError, match=r"%bad = operator.add"):
        aot_forward(graph)


def test_only_torch_level_graphs_are_accepted():
    b = GraphBuilder(Level.ATEN)
    x = b.input("x", TensorMeta((3,), torch.float32))
    with pytest.raises(ValueError, match="torch-level"):
        aot_forward(b.build([x]))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("pow_.Scalar", "pow.Tensor_Scalar"),  # pow.Scalar takes a scalar self
        ("pow_.Tensor", "pow.Tensor_Tensor"),
        ("add_.Tensor", "add.Tensor"),
        ("normal_.default", "normal_functional.default"),
    ],
)
def test_an_in_place_op_maps_to_the_functional_op_with_its_arguments(name, expected):
    from torchstrata.autograd.functional import functional_form

    packet, overload = name.split(".")
    form = functional_form(getattr(getattr(torch.ops.aten, packet), overload))
    assert str(form.op) == f"aten.{expected}"
    assert form.returns_self


def test_pow_with_a_scalar_exponent_in_place_in_a_backward(aot):
    """The backward of a vector norm of order 6 over a 0-dim tensor calls ``pow_.Scalar``
    on a tensor; tracing it as ``pow.Scalar`` (a scalar base) failed."""
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta((), torch.float64, requires_grad=True))
    out = aot.call(b, torch.linalg.vector_norm, x, ord=6)
    result = aot.check_training(b.build([out]), [torch.tensor(-1.5, dtype=torch.float64)])
    assert result.backward is not None
