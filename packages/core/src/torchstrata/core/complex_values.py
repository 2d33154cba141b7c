"""Where complex values stop: prims are real-valued, so an ATen node that reads or makes
a complex tensor (or takes a complex number) stays an ATen call, run by eager PyTorch.

The decomposition keeps such nodes (:func:`touches_complex`) and ``explain()`` names
them with :data:`COMPLEX_REASON`. See ``docs/decisions/0070-complex-stays-aten.md``.
"""

from __future__ import annotations

from typing import Any

import torch

from torchstrata.core.graph import Node
from torchstrata.core.meta import TensorMeta

#: Why an ATen node that touches complex values runs eagerly.
COMPLEX_REASON = "complex values run in ATen (prims are real-valued)"


def _is_complex(value: Any) -> bool:
    if isinstance(value, Node):
        return _is_complex(value.meta)
    if isinstance(value, TensorMeta):
        return value.dtype.is_complex
    if isinstance(value, torch.dtype):
        return value.is_complex
    if isinstance(value, complex):
        return True
    if isinstance(value, list | tuple):
        return any(_is_complex(item) for item in value)
    if isinstance(value, dict):
        return any(_is_complex(item) for item in value.values())
    return False


def touches_complex(node: Node) -> bool:
    """Whether ``node`` reads a complex tensor, takes a complex number or dtype, or makes
    a complex tensor (any of its results)."""
    return _is_complex(node.meta) or _is_complex(node.args) or _is_complex(dict(node.kwargs))
