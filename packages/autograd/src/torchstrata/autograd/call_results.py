"""What the recorder needs to know about one ATen call besides recording it: its results
without running it (:func:`direct_result`, on plain meta tensors), the metadata of its
results, the arguments of an overload from values bound by name, and tests on what it
returned."""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from torchstrata.core import TensorMeta, direct_meta


def _plain_meta(value: Any) -> Any:
    """A plain meta tensor's (or a 0-dim CPU constant's) :class:`TensorMeta`; else the value."""
    if type(value) is torch.Tensor and (value.is_meta or (value.ndim == 0 and value.is_cpu)):
        return TensorMeta.from_tensor(value)
    return value


def direct_result(
    func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Fresh meta tensors for a call that :func:`~torchstrata.core.direct_meta` can answer.

    On plain meta tensors only (not fake ones); it spares running torch's Python meta
    kernels, which import sympy. None when the call must run.
    """
    metas = [_plain_meta(arg) for arg in args]
    if not any(isinstance(meta, TensorMeta) and meta.device.type == "meta" for meta in metas):
        return None
    answer = direct_meta(str(func), metas, {key: _plain_meta(v) for key, v in kwargs.items()})
    if isinstance(answer, TensorMeta):
        return answer.to_meta_tensor()
    if isinstance(answer, tuple) and all(meta is not None for meta in answer):
        return tuple(meta.to_meta_tensor() for meta in answer if meta is not None)
    return None


def call_arguments(
    func: torch._ops.OpOverload, bound: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Positional and keyword arguments for ``func`` from values bound by name."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for argument in func._schema.arguments:
        value = bound.get(argument.name)
        if argument.kwarg_only:
            if value is not None:
                kwargs[argument.name] = value
        else:
            args.append(value)
    return tuple(args), kwargs


def result_meta(result: Any) -> Any:
    """The :class:`TensorMeta` of a tensor result, or a tuple of them (None for a non-tensor)."""
    if isinstance(result, torch.Tensor):
        return TensorMeta.from_tensor(result)
    return tuple(
        TensorMeta.from_tensor(item) if isinstance(item, torch.Tensor) else None for item in result
    )


def holds_tensor(value: Any) -> bool:
    """Whether ``value`` is a tensor or a tuple or list holding one."""
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, tuple | list) and any(isinstance(item, torch.Tensor) for item in value)


def fake_on_cpu(result: Any) -> bool:
    """Whether ``result`` holds tensors, all of them fake tensors on the CPU."""
    items = result if isinstance(result, tuple | list) else (result,)
    tensors = [item for item in items if isinstance(item, torch.Tensor)]
    return bool(tensors) and all(
        isinstance(item, FakeTensor) and item.device.type == "cpu" for item in tensors
    )
