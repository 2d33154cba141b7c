"""Memoised meta inference: the same op on arguments with the same metadata gives the
same result metadata, so a model's repeated layers run meta kernels only once.

Keys stand a node in for its :class:`~torchstrata.core.TensorMeta` and include the
global state meta kernels read (grad mode, default dtype, autocast); arguments that
cannot be hashed bypass the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from torchstrata.core import Node, NodeMeta, OpRef, infer_meta

#: Entries kept before the cache is cleared (a crude bound on its memory).
MAX_ENTRIES = 8192

_CACHE: dict[Any, Any] = {}


def _key(value: Any) -> Any:
    if isinstance(value, Node):
        return ("node", value.meta)
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_key(item) for item in value))
    if isinstance(value, dict):
        return ("dict", tuple((key, _key(item)) for key, item in value.items()))
    return (type(value), value)


def _global_state() -> tuple[Any, ...]:
    """Global torch state meta results depend on (grad mode makes ``requires_grad``)."""
    return (
        torch.is_grad_enabled(),
        torch.get_default_dtype(),
        torch.is_autocast_enabled("cpu"),
        torch.is_autocast_enabled("cuda"),
    )


def cached(
    kind: str,
    op: OpRef,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    compute: Callable[[], Any],
) -> Any:
    """``compute()``, remembered under ``kind``, the op and the arguments' metadata."""
    try:
        key = (kind, op, _key(args), _key(dict(kwargs)), _global_state())
        hash(key)
    except TypeError:
        return compute()
    if key in _CACHE:
        return _CACHE[key]
    result = compute()
    if len(_CACHE) >= MAX_ENTRIES:
        _CACHE.clear()
    _CACHE[key] = result
    return result


def cached_infer_meta(op: OpRef, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> NodeMeta:
    """:func:`torchstrata.core.infer_meta`, memoised (errors are not remembered)."""
    return cached("meta", op, args, kwargs, lambda: infer_meta(op, args, kwargs))
