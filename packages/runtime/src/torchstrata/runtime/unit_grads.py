"""A forward's unit gradients (``AotResult.num_unit_grads``): handing them to the backward,
and choosing, call by call, whether the forward computes them.

The autograd stage (``torchstrata.autograd.unit_grads``) has a scalar loss's forward also
return its gradients for a tangent of 1. The first backward scales them in place
(:func:`~torchstrata.runtime.unit_scale.scale_in_place`, free for a tangent of 1) and
returns them. They are kept on the autograd context, not saved with
``save_for_backward``: the engine would check their version after the scaling, and the
backward drops its reference so that the engine hands them on to ``x.grad`` without a
copy.

With a tangent other than 1 (a loss scaler's, or a random one) the scaling is a pass
over the gradients that the ordinary backward graph would not need. So each backward
notes whether its tangent was 1, without waiting for the GPU: a copy into pinned host
memory, read by a later forward. After a tangent other than 1 the runtime runs the
forward without unit gradients (and the backward graph) until a tangent of 1 comes back.
Likewise after a forward whose unit gradients were never taken (a loss computed with
gradients on but never backpropagated, as in an evaluation loop that forgot
``torch.no_grad()``): the forwards run without them until a backward runs again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from torchstrata.core import DirectLauncher
from torchstrata.runtime.unit_scale import scale_in_place


class UnitGrads:
    """The unit gradients among a forward's outputs (``count`` from ``start``);
    ``direct_launch`` launches the GPU scaling kernel without Triton's dispatch
    (:func:`~torchstrata.runtime.unit_scale.scale_in_place`)."""

    def __init__(self, start: int, count: int, direct_launch: DirectLauncher | None = None) -> None:
        self.start = start
        self.count = count
        self.direct_launch = direct_launch
        self._usable: bool | None = None if count else False
        self._one = True  # the last tangent seen was 1 (CPU tangents)
        # the same for GPU tangents: the last tangent, copied to pinned memory, its bytes
        # compared with those of a 1 of its dtype
        self._flag: torch.Tensor | None = None
        self._flag_view: Any = None
        self._one_bytes = b""
        self.unused = False  # the last unit gradients handed out died without a backward

    def take(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> tuple[Any, ...] | None:
        """The unit gradients among ``outputs``, or None unless each is a dense tensor
        of its own: sharing memory with no input, no other output and no other unit
        gradient. Decided on the first call (what aliases what is fixed by the compiled
        graph)."""
        if self._usable is None:
            self._usable = _own_tensors(inputs, outputs, self.start, self.count)
        return tuple(outputs[self.start : self.start + self.count]) if self._usable else None

    def expected(self) -> bool:
        """Whether the forward should compute unit gradients: the last tangent that has
        reached the host was 1 (a GPU tangent a step or two late; 1 at first), and the
        last unit gradients handed out were taken by a backward."""
        if self.unused:
            return False
        if self._flag_view is not None:
            return bool(self._flag_view.tobytes() == self._one_bytes)
        return self._one

    def watch(self) -> Pending:
        """A token for a context holding unit gradients (see :class:`Pending`)."""
        return Pending(self)

    def observe(self, tangent: torch.Tensor) -> None:
        """Note whether ``tangent`` (one element) is 1, without waiting for the GPU, and
        that a backward ran."""
        self.unused = False
        if tangent.device.type == "cpu":
            self._one = bool(tangent.reshape(()) == 1)
            return
        # the tangent itself, copied as it is (one operation); compared on the host
        if self._flag is None or self._flag.dtype != tangent.dtype:
            self._flag = torch.ones(1, dtype=tangent.dtype, pin_memory=True)
            self._flag_view = self._flag.view(torch.uint8).numpy()
            self._one_bytes = torch.ones(1, dtype=tangent.dtype).view(torch.uint8).numpy().tobytes()
        self._flag.copy_(tangent.reshape(1), non_blocking=True)

    def scaled(
        self, grads: Sequence[torch.Tensor], tangent: torch.Tensor
    ) -> Sequence[torch.Tensor]:
        """``grads``, each multiplied in place by the scalar ``tangent``."""
        for grad in grads:
            scale_in_place(grad, tangent, self.direct_launch)
        return grads


class Pending:
    """Kept on an autograd context next to its unit gradients. A backward marks it
    ``taken``; if the context dies first (its graph freed without a backward), it tells
    ``owner`` that unit gradients go unused."""

    __slots__ = ("owner", "taken")

    def __init__(self, owner: UnitGrads) -> None:
        self.owner = owner
        self.taken = False

    def __del__(self) -> None:
        if not self.taken:
            self.owner.unused = True


def _own_tensors(inputs: Sequence[Any], outputs: Sequence[Any], start: int, count: int) -> bool:
    units = outputs[start : start + count]
    if not all(isinstance(g, torch.Tensor) and g.is_contiguous() for g in units):
        return False
    others = [t for t in (*inputs, *outputs[:start]) if isinstance(t, torch.Tensor)]
    taken = {t.untyped_storage().data_ptr() for t in others if t.numel()}
    for grad in units:
        if grad.numel():
            pointer = grad.untyped_storage().data_ptr()
            if pointer in taken:
                return False
            taken.add(pointer)
    return True
