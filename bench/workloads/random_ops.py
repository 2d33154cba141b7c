"""fp64 references for workloads that draw random numbers.

A compiler need not reproduce eager's random stream (Inductor's Philox does not),
so dropout cannot be checked against one fixed reference. Instead we recover the
mask a run used and rebuild the exact fp64 result for that mask; a mask whose
drop rate is implausible, or outputs that disagree with it, make the run wrong.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from bench.workloads.spec import ReferenceFromOutputs, WrongResult


def resid_dropout_reference(p: float) -> ReferenceFromOutputs:
    """Reference builder for K6 (``h = x + dropout(r)``, ``y = layer_norm(h)``).

    Expects ``produced = [h, y, dx, dr, dw, db]``. The mask is read from ``dr``
    (zero exactly where dropped) because ``h`` alone is ambiguous where
    ``|r| << |x|`` in low precision.
    """

    def build(
        args: Sequence[Any],
        produced: Sequence[torch.Tensor],
        grad_outputs: Sequence[torch.Tensor] | None,
    ) -> list[torch.Tensor]:
        assert grad_outputs is not None, "K6 is a training workload"
        x, r, w, b = (t.detach().double().requires_grad_() for t in args)
        keep = produced[3] != 0
        dropped = 1.0 - keep.double().mean().item()
        slack = max(0.005, 6.0 * math.sqrt(p * (1 - p) / keep.numel()))
        if abs(dropped - p) > slack:
            raise WrongResult(f"dropout dropped {dropped:.4f} of elements, expected {p}")
        h = x + r * keep / (1.0 - p)
        y = F.layer_norm(h, (h.shape[-1],), w, b, 1e-5)
        grads = torch.autograd.grad((h, y), (x, r, w, b), [g.double() for g in grad_outputs])
        return [h.detach(), y.detach(), *grads]

    return build
