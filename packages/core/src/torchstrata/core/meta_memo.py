"""The metadata a graph builder inferred, kept per call while sizes are symbolic
(decision 0281).

On symbolic sizes a prim's meta function does ``SymInt`` arithmetic and an ATen op runs
on fake tensors: about ten times the cost of the same inference on static sizes. A graph
repeats the same calls on the same shapes (every layer of a model, a forward and its
backward's recomputation), so a builder keeps what it inferred, keyed by the op, its
operands' metadata (sizes as their sympy expressions, compared structurally, never
through a ``SymInt`` comparison that would record a condition) and its other
arguments. Inside a :func:`~torchstrata.core.symbolic_scope` (one ``ShapeEnv``) per
builder; on static sizes a prim's inference is cheaper than the key, but an ATen op's on
meta tensors (milliseconds: torch's Python meta kernels) is not, so those are kept for
the whole process by :func:`static_meta_key` (decision 0321).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from torchstrata.core.graph import Node
from torchstrata.core.meta import TensorMeta
from torchstrata.core.symbolic import SYMBOLIC_TYPES


class _Unkeyable(Exception):
    """An argument without a structural key: that call is inferred every time."""


def _key(value: Any, symbolic: bool = True) -> Any:
    if isinstance(value, Node):
        return ("node", _key(value.meta, symbolic))
    if isinstance(value, TensorMeta):
        return (
            "tensor",
            _key(value.shape, symbolic),
            _key(value.strides, symbolic),
            value.dtype,
            value.device,
            value.requires_grad,
        )
    if isinstance(value, SYMBOLIC_TYPES):
        if not symbolic:
            raise _Unkeyable
        return (type(value).__name__, value.node.expr)
    if isinstance(value, float):
        return (float, repr(value))  # -0.0 and 0.0 are different arguments
    if isinstance(value, list | tuple):
        return (type(value), tuple(_key(item, symbolic) for item in value))
    if isinstance(value, dict):
        return (dict, tuple((name, _key(item, symbolic)) for name, item in value.items()))
    if value is None or isinstance(
        value, bool | int | str | torch.dtype | torch.device | torch.memory_format | torch.layout
    ):
        return (type(value), value)
    raise _Unkeyable


def meta_key(op: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """A hashable key equal for two calls of ``op`` whose inferred metadata is equal
    (the same op, operands of the same metadata, the same other arguments); None where an
    argument has no such key."""
    try:
        return (op, _key(args), _key(dict(kwargs)))
    except _Unkeyable:
        return None


def _global_state() -> tuple[Any, ...]:
    """What an ATen op's inferred metadata reads besides its arguments: the default dtype
    (factory ops), grad mode (``requires_grad`` of the result) and autocast (casts)."""
    autocast = tuple(
        (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        for device in ("cpu", "cuda")
    )
    return torch.get_default_dtype(), torch.is_grad_enabled(), autocast


def static_meta_key(op: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """A key equal for two calls of ``op`` on static sizes whose metadata inferred on meta
    tensors is equal: :func:`meta_key` and the global state inference reads; None where an
    argument has no such key or a size is symbolic."""
    try:
        return (op, _key(args, False), _key(dict(kwargs), False), _global_state())
    except _Unkeyable:
        return None
