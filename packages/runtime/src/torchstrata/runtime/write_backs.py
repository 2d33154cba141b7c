"""Writing a compiled graph's new values of its written inputs back into them.

The forward returns one value per input it writes (``AotResult.mutated_inputs``); the
runner copies each into its input after the call, under ``torch.no_grad()``, except a
value that requires grad (a differentiable write-back, decision 0520), copied with grad
on. A forward that updated an input in place (the ``write_backs`` of its
``GraphContract``) returns the input itself: nothing to copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def write_back(inputs: Sequence[Any], mutated: tuple[int, ...], values: Sequence[Any]) -> None:
    """Copy each written input's new value into it, under ``torch.no_grad()`` except a
    value that requires grad (a differentiable write-back, decision 0520): that one is
    copied with grad on, as torch.compile writes back, so that the input requires grad
    afterwards as after eager's in-place op (through ``CopyBackwards``; an input that is
    a leaf requiring grad raises, as in eager)."""
    if not mutated:
        return
    with_grad = torch.is_grad_enabled()
    with torch.no_grad():
        for index, value in zip(mutated, values):
            if value is inputs[index]:
                continue  # updated in place (marked dirty where it requires grad)
            if with_grad and value.requires_grad:
                with torch.enable_grad():
                    inputs[index].copy_(value)
            elif not same_memory(value, inputs[index]):
                inputs[index].copy_(value)


def same_memory(value: Any, target: torch.Tensor) -> bool:
    """Whether ``value`` is ``target`` or an alias of exactly its elements: an update done
    in place, or a value left as it was (an eval-mode batch norm's running statistics),
    which an ``autograd.Function`` returns as a new alias of its input. Copying it would
    change nothing but the input's version counter, and a backward that saved the input
    would then refuse to run."""
    if value is target:
        return True
    return (
        isinstance(value, torch.Tensor)
        and value.data_ptr() == target.data_ptr()
        and value.dtype == target.dtype
        and value.shape == target.shape
        and value.stride() == target.stride()
    )


def differentiable_writes(
    num_user: int, mutated: Sequence[int], tangent_outputs: Sequence[int]
) -> tuple[tuple[int, int], ...]:
    """``(forward output, input)`` of each write-back that gets a tangent (decision 0520):
    write-back ``k`` is output ``num_user + k``, ``tangent_outputs`` count user outputs and
    write-backs together."""
    tangents = set(tangent_outputs)
    return tuple(
        (num_user + k, index) for k, index in enumerate(mutated) if num_user + k in tangents
    )


def refuse_written_leaves(inputs: Sequence[Any], writes: tuple[tuple[int, int], ...]) -> None:
    """Raise eager's error, before anything is written, where an input that the graph
    writes from a value that requires grad (``(output, input)`` pairs) is a leaf that
    requires grad."""
    for _, index in writes:
        tensor = inputs[index]
        if tensor.requires_grad and tensor.is_leaf:
            raise RuntimeError(
                "a leaf Variable that requires grad is being used in an in-place operation."
            )
