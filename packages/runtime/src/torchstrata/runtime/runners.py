"""What a program calls for each graph: compiled forwards (and backwards) wrapped so that
they return the user's outputs, write mutated inputs back, rebuild outputs that alias
inputs, and — when gradients are needed — run as one ``torch.autograd.Function``.

The conventions are those of :class:`torchstrata.core.AotResult`: forward outputs are
user outputs, then write-backs for ``mutated_inputs``, then ``num_saved`` saved values;
backward takes the saved values and one contiguous tangent per ``tangent_outputs`` entry
and returns one gradient per ``grad_inputs`` entry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchstrata.core import AotResult, TensorMeta

#: Runs one graph: graph inputs in, the user's outputs (a tuple of tensors) out.
GraphRunner = Callable[..., tuple[Any, ...]]
#: A compiled (or interpreted) graph: tensors in, all graph outputs out.
GraphFn = Callable[..., Sequence[Any]]


def _layout(aot: AotResult) -> tuple[int, tuple[int, ...], tuple[Any, ...]]:
    """(number of user outputs, mutated input indices, output aliases)."""
    total = len(aot.forward.outputs)
    num_user = aot.num_user_outputs or total - aot.num_mutations - aot.num_saved
    aliases = tuple(getattr(aot, "output_aliases", ()) or ())
    return num_user, aot.mutated_inputs, aliases


def _write_back(inputs: Sequence[Any], mutated: tuple[int, ...], values: Sequence[Any]) -> None:
    if mutated:
        with torch.no_grad():
            for index, value in zip(mutated, values):
                inputs[index].copy_(value)


def _apply_aliases(inputs: Sequence[Any], outputs: list[Any], aliases: tuple[Any, ...]) -> None:
    for position, alias in enumerate(aliases):
        if alias is not None:
            index, size, stride, offset = alias
            outputs[position] = inputs[index].as_strided(size, stride, offset)


def inference_runner(fn: GraphFn, aot: AotResult | None) -> GraphRunner:
    """Wrap a forward: apply write-backs and aliases, return the user's outputs only."""
    if aot is None:
        return lambda *inputs: tuple(fn(*inputs))
    num_user, mutated, aliases = _layout(aot)

    def run(*inputs: Any) -> tuple[Any, ...]:
        outputs = fn(*inputs)
        _write_back(inputs, mutated, outputs[num_user : num_user + len(mutated)])
        user = list(outputs[:num_user])
        _apply_aliases(inputs, user, aliases)
        return tuple(user)

    return run


def training_runner(forward: GraphFn, backward: GraphFn, aot: AotResult) -> GraphRunner:
    """Forward and backward as one ``autograd.Function``; gradients reach the inputs
    listed in ``aot.grad_inputs``."""
    num_user, mutated, aliases = _layout(aot)
    num_mutations = len(mutated)
    tangent_outputs = tuple(aot.tangent_outputs)
    grad_inputs = tuple(aot.grad_inputs)
    metas = [node.meta for node in aot.forward.outputs[:num_user]]

    def zeros_like_output(index: int) -> torch.Tensor:
        meta = metas[index]
        assert isinstance(meta, TensorMeta)
        return torch.zeros(meta.shape, dtype=meta.dtype, device=meta.device)

    class CompiledGraphFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *inputs: Any) -> Any:
            outputs = forward(*inputs)
            ctx.num_inputs = len(inputs)
            ctx.save_for_backward(*outputs[num_user + num_mutations :])
            differentiable = set(tangent_outputs)
            ctx.mark_non_differentiable(
                *(
                    out
                    for i, out in enumerate(outputs[: num_user + num_mutations])
                    if i not in differentiable and isinstance(out, torch.Tensor)
                )
            )
            return tuple(outputs[: num_user + num_mutations])

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            tangents = [
                (grads[i] if grads[i] is not None else zeros_like_output(i)).contiguous()
                for i in tangent_outputs
            ]
            computed = backward(*ctx.saved_tensors, *tangents)
            result: list[Any] = [None] * ctx.num_inputs
            for index, grad in zip(grad_inputs, computed):
                result[index] = grad
            return tuple(result)

    def run(*inputs: Any) -> tuple[Any, ...]:
        outputs = CompiledGraphFunction.apply(*inputs)
        _write_back(inputs, mutated, outputs[num_user:])
        user = list(outputs[:num_user])
        _apply_aliases(inputs, user, aliases)
        return tuple(user)

    return run
