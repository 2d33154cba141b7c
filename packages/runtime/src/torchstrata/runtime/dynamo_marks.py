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


#: What torch.compile's ``mark_static`` sets on an ``nn.Module`` class: its instances'
#: int attributes stay constants.
_STATIC_CLASS_ATTR = "_dynamo_marked_static"


def dynamo_static_class(cls: type) -> bool:
    """Whether torch.compile's ``mark_static`` marked the ``nn.Module`` class ``cls``."""
    return bool(getattr(cls, _STATIC_CLASS_ATTR, False))
