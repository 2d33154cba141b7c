"""The metadata a training runner lowered once for many sizes reads at each call's sizes
(decision 0395): output shapes, the saved layouts the backward takes, the size carrier,
and the refusal of a forward that returns a saved value laid out otherwise."""

from __future__ import annotations

import warnings

import pytest
import torch

from torchstrata.core import Graph, Level, Node, SizeGuards, TensorMeta
from torchstrata.runtime.errors import TorchstrataFallbackWarning
from torchstrata.runtime.symbolic_training import SizedMetas, refuse_other_layouts


def _metas():
    guards = SizeGuards({"s0": 5, "s1": 3})
    rows, cols = guards.symbol("s0"), guards.symbol("s1")
    output = TensorMeta((rows, 4), torch.float32, strides=(4, 1))
    saved = TensorMeta((rows, cols, 4), torch.float32, strides=(cols * 4, 4, 1))
    return guards, rows, cols, output, saved


def test_metadata_at_each_calls_sizes():
    guards, _rows, _cols, output, saved = _metas()
    with guards.active():
        sized = SizedMetas({"s0": (0, 0), "s1": (1, 0)}, [output], [saved], ("s1", "s0"))
    inputs = (torch.zeros(7, 2), torch.zeros(9))
    key = sized.key(inputs)
    assert key == (7, 9)
    assert sized.output_meta(0, key) == TensorMeta((7, 4), torch.float32)
    assert sized.saved_metas(key) == [TensorMeta((7, 9, 4), torch.float32)]
    (carrier,) = sized.backward_inputs(key)
    assert carrier.shape == (9, 7) and carrier.stride() == (0, 0)


def test_saved_values_checked_at_each_size():
    # a saved value laid out otherwise than the backward takes it at its size is copied
    # into that layout (with the per-size runner's warning), whatever the first size was
    guards, _rows, _cols, output, saved = _metas()
    with guards.active():
        sized = SizedMetas({"s0": (0, 0), "s1": (1, 0)}, [output], [saved])
    dense = torch.randn(5, 3, 4)
    assert sized.check_saved([dense], (5, 3))[0] is dense
    transposed = torch.randn(4, 6, 2).permute(2, 1, 0)  # (2, 6, 4), not contiguous
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (fixed,) = sized.check_saved([transposed], (2, 6))
    assert any(issubclass(w.category, TorchstrataFallbackWarning) for w in caught)
    assert fixed.is_contiguous() and torch.equal(fixed, transposed)


def _backward_taking(meta: TensorMeta) -> Graph:
    node = Node("saved", None, meta=meta)
    return Graph(Level.PRIMS, (node,), (), (node,))


def test_a_saved_value_laid_out_otherwise_is_refused():
    guards, rows, cols, _output, saved = _metas()
    with guards.active():
        refuse_other_layouts([saved], _backward_taking(saved), 1)  # the same: accepted
        other = TensorMeta(saved.shape, torch.float32, strides=(4, rows * 4, 1))
        with pytest.raises(NotImplementedError, match="another layout"):
            refuse_other_layouts([other], _backward_taking(saved), 1)
        longer = TensorMeta((rows + 1, cols, 4), torch.float32)
        with pytest.raises(NotImplementedError):
            refuse_other_layouts([longer], _backward_taking(saved), 1)
    assert not guards.conditions  # compared by expression: nothing decided
