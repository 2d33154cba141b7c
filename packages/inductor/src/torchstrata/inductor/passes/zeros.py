"""Zero tensors in the prims graphs that the rewrites before lowering build and match.

A zero tensor is spelled one way: a 0-d ``full(0)`` broadcast to its shape, so that it
costs no memory. :func:`~torchstrata.inductor.passes.rewrites.gather_as_reduction` builds
``where(hit, value, zeros)`` and :func:`~torchstrata.inductor.passes.one_hot.one_hot_sums`
recognises that ``zeros``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from torchstrata.core import GraphBuilder, Node, prim

_FULL, _BROADCAST = prim("full"), prim("broadcast_in_dim")


def zeros(
    builder: GraphBuilder, shape: Sequence[int], dtype: torch.dtype, device: torch.device
) -> Node:
    """Append a tensor of zeros of ``shape`` and ``dtype`` on ``device`` to ``builder``."""
    return builder.call(_BROADCAST, builder.call(_FULL, (), 0, dtype, device), shape, ())


def is_zeros(value: Any) -> bool:
    """True when ``value`` is a node of zeros: ``full(0)``, broadcast or not."""
    if isinstance(value, Node) and value.op == _BROADCAST:
        value = value.args[0]
    return isinstance(value, Node) and value.op == _FULL and value.args[1] == 0
