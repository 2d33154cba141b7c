"""Inputs that require grad, traced as eager sees them when a graph writes them in place.

A compiled function's input that requires grad is, in eager, often not a leaf: a module
buffer written in place from a parameter (a static KV cache, ``k_cache.index_copy_(2,
pos, k)``) requires grad after the first call and is written again by the next. The
trace differentiates with respect to fake *leaves*, and autograd refuses an in-place op
on a leaf that requires grad. So each such leaf is traced through a *stand-in*: a copy
made outside the recorder (the recorder knows it as the graph input itself), whose
backward hands its gradient to the leaf unchanged. An in-place op on the stand-in is then
allowed, as on eager's non-leaf, and the gradient reaching the leaf is the gradient of
the input's old value.

A written input's new value is differentiable (a write-back that gets a tangent, like a
user output: decision 0520) where the graph recorded autograd history on it: its
``grad_fn`` is no longer the one it started with. A write under ``torch.no_grad()``
(running statistics, an EMA of a parameter) records none and stays a plain write-back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


class TracedInputs:
    """The tensors a joint trace runs the graph on, one per graph input.

    :param leaves: the fake inputs (leaves; those that require grad are what the
        backward differentiates with respect to).
    """

    def __init__(self, leaves: Sequence[torch.Tensor]) -> None:
        self.leaves = list(leaves)
        #: the inputs that require grad (read before the graph runs: a write from a value
        #: that requires grad makes an input that did not require it)
        self.wanted = tuple(i for i, leaf in enumerate(leaves) if leaf.requires_grad)
        #: what the graph runs on: each leaf, or its stand-in where it requires grad
        self.tensors = [_stand_in(leaf) if leaf.requires_grad else leaf for leaf in leaves]
        # each tensor's grad_fn before the graph ran (kept alive: compared by identity)
        self._origins: list[Any] = [tensor.grad_fn for tensor in self.tensors]

    def has_new_history(self, index: int) -> bool:
        """Whether input ``index``'s value (after the graph wrote it) requires grad
        through autograd history that the graph recorded."""
        tensor = self.tensors[index]
        return tensor.requires_grad and tensor.grad_fn is not self._origins[index]


def _stand_in(leaf: torch.Tensor) -> torch.Tensor:
    """A non-leaf with ``leaf``'s value and layout whose gradient is ``leaf``'s (a copy
    into the same strides: its backward passes a gradient of the same dtype through,
    recording no op); a view for an expanded input (a stride 0: no in-place op can write
    it anyway). Sizes and strides are not compared where symbolic (no size condition)."""
    with torch.enable_grad():
        if any(_expanded(size, stride) for size, stride in zip(leaf.shape, leaf.stride())):
            return leaf.view_as(leaf)
        copy = torch.empty_strided(leaf.shape, leaf.stride(), dtype=leaf.dtype, device=leaf.device)
        return copy.copy_(leaf)


def _expanded(size: Any, stride: Any) -> bool:
    # a symbolic size is neither 0 nor 1 (those are specialised)
    return type(stride) is int and stride == 0 and (type(size) is not int or size > 1)
