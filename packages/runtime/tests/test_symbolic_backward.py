"""The backward of a training graph lowered once for many sizes at each call's sizes
(decision 0485): the compiled backward once a size's first backward ran, the ATen graph
where it raised, and an error with notes where it cannot fall back."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import pytest
import torch

from torchstrata.core import Graph, GraphBuilder, Level, TensorMeta, aten
from torchstrata.runtime import reset_size_lowering_stats, size_lowering_stats
from torchstrata.runtime.errors import TorchstrataFallbackWarning
from torchstrata.runtime.runners import call_boxed
from torchstrata.runtime.symbolic_backward import (
    BACKWARD_NOTE,
    NO_GRAPH,
    FirstBackward,
    SizedBackward,
)


class Failure(RuntimeError):
    """What the compiled backward raises."""


def _doubling(values: Mapping[str, int]) -> Graph:
    """The ATen backward at ``values``: its tangent times 2 (one input: the size carrier
    the compiled backward takes after it is not the graph's)."""
    builder = GraphBuilder(Level.ATEN)
    tangent = builder.input("tangent", TensorMeta((values["s0"],), torch.float32))
    return builder.build([builder.call(aten("mul.Tensor"), tangent, 2.0)])


def _compiled(fails_at: int, calls: list[int]) -> Any:
    def backward(tangent: torch.Tensor, carrier: torch.Tensor) -> tuple[torch.Tensor]:
        calls.append(tangent.shape[0])
        if tangent.shape[0] == fails_at:
            raise Failure("kernel failed")
        return (tangent * 2,)

    return backward


def test_a_first_backward_that_raises_runs_the_aten_graph_from_then_on():
    reset_size_lowering_stats()
    calls: list[int] = []
    sized = SizedBackward(_compiled(7, calls), ["s0"], _doubling)
    carrier = torch.zeros(())
    assert isinstance(sized.at((5,)), FirstBackward)
    torch.testing.assert_close(sized.at((5,))(torch.ones(5), carrier)[0], torch.full((5,), 2.0))
    assert sized.at((5,)) is sized.fn  # no wrapper once it ran
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            (grad,) = call_boxed(sized.at((7,)), [torch.ones(7), carrier])  # as the runner
            torch.testing.assert_close(grad, torch.full((7,), 2.0))
    assert calls == [5, 7]  # the second backward at 7 ran the ATen graph only
    (warned,) = [w for w in caught if issubclass(w.category, TorchstrataFallbackWarning)]
    assert "{'s0': 7}" in str(warned.message) and "Failure: kernel failed" in str(warned.message)
    assert size_lowering_stats() == {"fallback: first backward: Failure: kernel failed": 1}


def test_a_lowering_without_an_aten_graph_raises_with_the_note():
    sized = SizedBackward(_compiled(7, []), ["s0"], None)
    with pytest.raises(Failure) as raised:
        sized.at((7,)).boxed([torch.ones(7), torch.zeros(())])
    assert raised.value.__notes__ == [f"torchstrata: {NO_GRAPH}", BACKWARD_NOTE]


def test_an_aten_graph_that_raises_too_raises_the_compiled_error_and_records_nothing():
    def failing(values: Mapping[str, int]) -> Graph:
        builder = GraphBuilder(Level.ATEN)
        tangent = builder.input("tangent", TensorMeta((values["s0"],), torch.float32))
        index = builder.input("index", TensorMeta((1,), torch.int64))
        return builder.build([builder.call(aten("index_select.default"), tangent, 0, index)])

    calls: list[int] = []

    def backward(tangent: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor]:
        calls.append(tangent.shape[0])
        raise Failure("bound check failed")

    sized = SizedBackward(backward, ["s0"], failing)
    with pytest.raises(Failure) as raised:
        sized.at((3,))(torch.ones(3), torch.tensor([9]))  # out of range: eager raises too
    assert any("its ATen graph raised too" in note for note in raised.value.__notes__)
    assert raised.value.__notes__[-1] == BACKWARD_NOTE
    assert not sized.settled and isinstance(sized.at((3,)), FirstBackward)
