"""Shared helpers (the ``aot`` fixture): build torch graphs, check ``aot_forward`` results."""

from __future__ import annotations

import pytest
import torch

from torchstrata.autograd import aot as aot_graphs
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

    @staticmethod
    def check_training(
        graph: Graph,
        inputs: list[torch.Tensor],
        *,
        seed: int = 0,
        rtol: float = 1e-7,
        atol: float = 1e-9,
    ):
        """Run ``aot(graph)``'s forward and backward with ``interpret`` and compare user
        outputs, mutated inputs and gradients with eager autograd (the tangents of the
        written inputs' new values included); return the result."""
        result = aot_graphs(graph)
        verify(result.forward)
        if result.backward is not None:
            verify(result.backward)
        metas = graph.input_metas
        leaves = [t.detach().clone().requires_grad_(m.requires_grad) for t, m in zip(inputs, metas)]
        # an input that requires grad is a non-leaf, as a written buffer is in eager
        passed = [leaf.clone() if leaf.requires_grad else leaf for leaf in leaves]
        origins = [tensor.grad_fn for tensor in passed]
        torch.manual_seed(seed)
        expected = interpret(graph, *passed)
        ours = [t.detach().clone() for t in inputs]
        before = [t.clone() for t in ours]
        torch.manual_seed(seed)
        outputs = interpret(result.forward, *ours)
        for got, want in zip(ours, before, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)  # the forward is functional
        n, m = result.num_user_outputs, result.num_mutations
        assert n == len(graph.outputs)
        saved_end = n + m + result.num_saved
        assert len(outputs) == saved_end + result.num_unit_grads
        for index, value in zip(result.mutated_inputs, outputs[n : n + m], strict=True):
            ours[index].copy_(value)
        for got, want in zip(outputs[:n], expected, strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape
            torch.testing.assert_close(got, want.detach(), rtol=rtol, atol=atol)
        for got, want in zip(ours, passed, strict=True):
            torch.testing.assert_close(got, want.detach(), rtol=rtol, atol=atol)
        assert len(result.output_aliases) == n
        for alias, want in zip(result.output_aliases, expected, strict=True):
            if alias is not None:
                index, size, stride, offset = alias
                view = ours[index].as_strided(size, stride, ours[index].storage_offset() + offset)
                torch.testing.assert_close(view, want.detach(), rtol=rtol, atol=atol)
        # the user outputs, then the written inputs whose new values have history
        expected = [*expected, *(passed[index] for index in result.mutated_inputs)]
        written = [passed[i].grad_fn is not origins[i] for i in result.mutated_inputs]
        differentiable = [i for i, out in enumerate(expected[:n]) if out.requires_grad]
        differentiable += [n + k for k, has_history in enumerate(written) if has_history]
        wanted = [i for i, meta in enumerate(metas) if meta.requires_grad]
        if not differentiable or not wanted:
            assert result.backward is None
            return result
        generator = torch.Generator().manual_seed(seed + 1)
        tangents = [
            torch.randn(expected[i].shape, generator=generator, dtype=torch.float64).to(
                expected[i].dtype
            )
            for i in differentiable
        ]
        grads = torch.autograd.grad(
            [expected[i] for i in differentiable],
            [leaves[i] for i in wanted],
            tangents,
            allow_unused=True,
        )
        assert result.tangent_outputs == tuple(differentiable)
        assert result.grad_inputs == tuple(i for i, g in zip(wanted, grads) if g is not None)
        assert result.backward is not None
        ours_grads = interpret(result.backward, *outputs[n + m : saved_end], *tangents)
        want_grads = [g for g in grads if g is not None]
        assert len(ours_grads) == len(want_grads)
        for got, want in zip(ours_grads, want_grads, strict=True):
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
        if result.num_unit_grads:  # the forward's gradients for a tangent of 1, scaled
            assert result.num_unit_grads == len(want_grads)
            for got, want in zip(outputs[saved_end:], want_grads, strict=True):
                torch.testing.assert_close(got * tangents[0], want, rtol=rtol, atol=atol)
        return result


@pytest.fixture
def aot() -> type[AotHelpers]:
    """The helpers above."""
    return AotHelpers
