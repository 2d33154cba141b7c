"""Dimension marks that code written for torch.compile puts on its tensors (decision 0325).

Part of the Dynamo adapter: Dynamo's ``mark_dynamic`` / ``mark_static`` store the marked
dimensions as plain tensor attributes. They are read here, never written, and nothing is
imported from Dynamo, so a tensor marked for torch.compile is compiled the same way by
:func:`torchstrata.runtime.compile`.
"""

from __future__ import annotations

import torch

_DYNAMIC_ATTR = "_dynamo_dynamic_indices"
_STATIC_ATTR = "_dynamo_static_indices"


def dynamo_dynamic_dims(tensor: torch.Tensor) -> set[int]:
    """The dimensions torch.compile's ``mark_dynamic`` marked on ``tensor``."""
    return set(getattr(tensor, _DYNAMIC_ATTR, ()))


def dynamo_static_dims(tensor: torch.Tensor) -> set[int]:
    """The dimensions torch.compile's ``mark_static`` marked on ``tensor``."""
    return set(getattr(tensor, _STATIC_ATTR, ()))
