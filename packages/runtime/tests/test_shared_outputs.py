"""Runners rebuild outputs as views of a hidden base output (``num_hidden_outputs``),
copying a base that was computed with other strides than its traced ones."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import AotResult, GraphBuilder, Level, TensorMeta, aten
from torchstrata.runtime.runners import inference_runner, training_runner

#: The traced layout of the hidden base: column-major, which the forwards below do not give.
_COLUMN_MAJOR = (1, 3)


def _overlapping_rows_aot(training: bool) -> AotResult:
    """A forward returning ``base[0:2]``, ``base[1:3]`` and the hidden ``base`` (3, 4)."""
    b = GraphBuilder(Level.ATEN)
    x = b.input("x", TensorMeta((3, 4), torch.float32, requires_grad=training))
    base = b.call(
        aten("clone.default"), x, meta=TensorMeta((3, 4), torch.float32, strides=_COLUMN_MAJOR)
    )
    rows = TensorMeta((2, 4), torch.float32, strides=_COLUMN_MAJOR)
    first = b.call(aten("slice.Tensor"), base, 0, 0, 2, meta=rows)
    second = b.call(aten("slice.Tensor"), base, 0, 1, 3, meta=rows)
    views = ((2, (2, 4), _COLUMN_MAJOR, 0), (2, (2, 4), _COLUMN_MAJOR, 1), None)
    backward = None
    if training:
        bb = GraphBuilder(Level.ATEN)
        tangents = [
            bb.input(f"t{i}", TensorMeta(shape, torch.float32))
            for i, shape in enumerate(((2, 4), (2, 4), (3, 4)))
        ]
        backward = bb.build([tangents[2]])
    return AotResult(
        forward=b.build([first, second, base]),
        backward=backward,
        num_user_outputs=3,
        output_views=views,
        num_hidden_outputs=1,
        tangent_outputs=(0, 1, 2) if training else (),
        grad_inputs=(0,) if training else (),
    )


def _forward(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The compiled forward: every output contiguous (not the traced layout)."""
    return x[0:2] * 2, x[1:3] * 2, x * 2


def _backward(tangent_first, tangent_second, tangent_base):
    """The gradient of ``x * 2`` through the three outputs."""
    grad = tangent_base.clone()
    grad[0:2] += tangent_first
    grad[1:3] += tangent_second
    return (grad * 2,)


def _check_views(first, second, x):
    torch.testing.assert_close(first, x[0:2].detach() * 2)
    torch.testing.assert_close(second, x[1:3].detach() * 2)
    assert first._base is not None and first._base is second._base
    assert first.stride() == second.stride() == _COLUMN_MAJOR
    assert second.storage_offset() - first.storage_offset() == 1


def test_inference_rebuilds_views_on_a_restrided_hidden_base():
    x = torch.randn(3, 4)
    outputs = inference_runner(_forward, _overlapping_rows_aot(training=False))(x)
    assert len(outputs) == 2  # the hidden base is not returned
    first, second = outputs
    _check_views(first, second, x)
    first.add_(1)
    torch.testing.assert_close(second[0], x[1] * 2 + 1)


@pytest.mark.parametrize("update_first", [False, True])
def test_training_views_of_a_restrided_hidden_base_get_gradients(update_first):
    x = torch.randn(3, 4, requires_grad=True)
    runner = training_runner(_forward, _backward, _overlapping_rows_aot(training=True))
    outputs = runner(x)
    assert len(outputs) == 2
    first, second = outputs
    _check_views(first, second, x)
    eager_x = x.detach().clone().requires_grad_()
    eager_z = (eager_x * 2).t().contiguous().t()
    eager = [eager_z[0:2], eager_z[1:3]]
    weights = torch.randn(2, 2, 4)
    for pair in ((first, second), eager):
        if update_first:
            pair[0].mul_(3)  # row 1 of the second triples too
        sum((out * w).sum() for out, w in zip(pair, weights, strict=True)).backward()
    torch.testing.assert_close(x.grad, eager_x.grad)


def test_a_returned_owner_computed_with_other_strides_is_restrided_for_its_views():
    b = GraphBuilder(Level.ATEN)
    x = b.input("x", TensorMeta((3, 4), torch.float32))
    owner = b.call(
        aten("clone.default"), x, meta=TensorMeta((3, 4), torch.float32, strides=_COLUMN_MAJOR)
    )
    rows = b.call(
        aten("slice.Tensor"),
        owner,
        0,
        1,
        3,
        meta=TensorMeta((2, 4), torch.float32, strides=_COLUMN_MAJOR),
    )
    aot = AotResult(
        forward=b.build([owner, rows]),
        num_user_outputs=2,
        output_views=(None, (0, (2, 4), _COLUMN_MAJOR, 1)),
    )
    x_value = torch.randn(3, 4)
    whole, part = inference_runner(lambda t: (t * 2, t[1:3] * 2), aot)(x_value)
    assert whole.stride() == _COLUMN_MAJOR  # the traced (eager) layout
    torch.testing.assert_close(whole, x_value * 2)
    assert part._base is whole
    whole.add_(1)
    torch.testing.assert_close(part, x_value[1:3] * 2 + 1)
