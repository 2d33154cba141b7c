"""Shared helpers (the ``aot`` fixture): build torch graphs, check ``aot_forward`` results."""

from __future__ import annotations

import pytest
import torch

from torchstrata.autograd import aot_forward
from torchstrata.core import (
    Graph,
    GraphBuilder,
    Level,
    Node,
    TensorMeta,
    interpret,
    random_inputs,
    torch_op,
    verify,
)


class AotHelpers:
    """Graph-building and checking helpers handed to tests by the ``aot`` fixture."""

    @staticmethod
    def call(builder: GraphBuilder, fn, *args, **kwargs) -> Node:
        """Append a node calling the public torch callable ``fn``."""
        op = torch_op(fn)
        assert op is not None, f"{fn} is not a known torch callable"
        return builder.call(op, *args, **kwargs)

    @staticmethod
    def builder(**inputs: tuple[tuple[int, ...], torch.dtype]) -> tuple[GraphBuilder, list[Node]]:
        """A torch-level builder and its input nodes, from ``name=(shape, dtype)``."""
        builder = GraphBuilder(Level.TORCH)
        nodes = [
            builder.input(name, TensorMeta(shape, dtype)) for name, (shape, dtype) in inputs.items()
        ]
        return builder, nodes

    @staticmethod
    def check(graph: Graph, *, seed: int = 0) -> Graph:
        """Lower ``graph``, verify the ATen graph, compare it with the torch graph; return it."""
        result = aot_forward(graph)
        forward = result.forward
        assert forward.level is Level.ATEN
        assert result.backward is None
        assert result.num_user_outputs == len(graph.outputs)
        verify(forward)
        inputs = random_inputs(graph, seed=seed)
        expected = interpret(graph, *inputs)
        actual = interpret(forward, *inputs)
        assert len(actual) == len(expected)
        for got, want in zip(actual, expected, strict=True):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        return forward


@pytest.fixture
def aot() -> type[AotHelpers]:
    """The helpers above."""
    return AotHelpers
