"""Ops inside an autocast region, traced with the casts autocast makes in eager.

Autocast decides per op and per argument: lower-precision ops (``linear``, ``matmul``,
``conv2d``...) cast their floating arguments on the region's device type to its dtype,
float32 ops (``mse_loss``, ``layer_norm`` on CUDA, ``exp`` on CUDA...) cast them to
float32, promoting ops (``cat``, ``stack``) to the widest; float64 tensors and tensors on
other device types are never cast. The op lists differ between device types and torch
versions and are not public, so instead of copying them the capture asks autocast: it
runs the op on fake tensors under the real ``torch.autocast`` and takes the result
dtypes as the truth, then picks the casts (none, to the region's dtype, or to a result
dtype) that give the same dtypes without autocast. The graph holds those casts
explicitly. When no choice reproduces eager's dtypes the op raises
:class:`AutocastMismatch`, which the tracer turns into a graph break (the op runs in
eager, under the real autocast).

An op whose outputs hold no floating tensor (``argmax``) cannot be told apart by its
result dtypes; it is traced uncast (autocast's lists hold no such op that reads
low-precision inputs differently, as of torch 2.13).

The choice is remembered per op, argument metadata, region and default dtype (a model's
repeated layers ask once; each ask costs a few fake-tensor runs, about 2 ms).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from torchstrata.capture.variables import (
    ConstVar,
    NotConstant,
    SequenceVar,
    TensorVar,
    Var,
    python_value,
)
from torchstrata.core import OpKind, OpRef, enabled_autocast, size_hint

if TYPE_CHECKING:  # only for annotations: the tracer imports this module
    from torchstrata.capture.tracer import Tracer

CAST = OpRef(OpKind.TORCH, "torch.Tensor.to")

#: (device type, dtype) of an enabled autocast region.
Region = tuple[str, torch.dtype]


class AutocastMismatch(Exception):
    """No casts of an op's arguments reproduce what autocast makes of it."""


#: Entries kept before the memo is cleared (a crude bound on its memory).
MAX_CHOICES = 4096
#: (op, argument keys, region, ...) -> the cast target chosen, or the mismatch message.
_CHOICES: dict[Any, torch.dtype | str | None] = {}


def _key(var: Var) -> Any:
    """``var`` as part of a memo key: a tensor by its metadata, a sequence by its items,
    anything else by type and value (raises ``TypeError``/:class:`NotConstant` when it
    cannot be a key)."""
    if isinstance(var, TensorVar):
        return ("tensor", var.meta)
    if isinstance(var, SequenceVar):
        return (var.is_list, tuple(_key(item) for item in var.items))
    value = python_value(var)
    hash(value)
    return (type(value), value)


def _eligible(meta: Any, region: Region, target: torch.dtype) -> bool:
    """Whether autocast would cast a tensor of ``meta`` to ``target`` in ``region``."""
    dtype = meta.dtype
    return (
        meta.device.type == region[0]
        and dtype.is_floating_point
        and dtype != torch.float64
        and dtype != target
    )


def _tensors(var: Var) -> list[TensorVar]:
    if isinstance(var, TensorVar):
        return [var]
    if isinstance(var, SequenceVar):
        return [t for item in var.items for t in _tensors(item)]
    return []


def _fake(var: Var, cast_to: torch.dtype | None, region: Region) -> Any:
    """``var`` as a value for the fake run (tensors as empty fakes, cast like the graph
    would cast them to ``cast_to``); raises :class:`NotConstant` for unknown values."""
    if isinstance(var, TensorVar):
        meta = var.meta
        dtype = cast_to if cast_to is not None and _eligible(meta, region, cast_to) else meta.dtype
        shape, strides = _hinted(meta.shape), _hinted(meta.strides)
        return torch.empty_strided(shape, strides, dtype=dtype, device=meta.device)
    if isinstance(var, SequenceVar):
        items = [_fake(item, cast_to, region) for item in var.items]
        return items if var.is_list else tuple(items)
    value = python_value(var)
    return _hinted((value,))[0] if isinstance(value, torch.SymInt) else value


def _hinted(sizes: Any) -> tuple[Any, ...]:
    """``sizes`` with each symbolic size replaced by its value in the call being traced
    (no guard): autocast's dtypes do not depend on sizes, and the fake run has a mode of
    its own, not the capture's ShapeEnv (symbolic sizes there failed on CUDA: the frame
    compiled static per shape). A size without a value (data-dependent) stays symbolic."""
    hinted = []
    for size in sizes:
        try:
            hinted.append(size_hint(size) if isinstance(size, torch.SymInt) else size)
        except ValueError:
            hinted.append(size)
    return tuple(hinted)


def _result_dtypes(
    op: OpRef,
    args: tuple[Var, ...],
    kwargs: Mapping[str, Var],
    region: Region,
    cast_to: torch.dtype | None,
    under_autocast: bool,
) -> tuple[Any, ...] | None:
    """The dtypes (None for non-tensors) of ``op``'s results on fake tensors, its
    positional arguments cast to ``cast_to`` as :func:`_cast` would (keywords are not
    cast); None when it fails there."""
    from torch._subclasses.fake_tensor import FakeTensorMode  # imports sympy: only here

    # Autocast may be on already (the autocast the function is called under): the runs
    # without it switch it off, for every device type.
    devices = {region[0], *(device for device, _ in enabled_autocast())}
    try:
        with FakeTensorMode(), torch.no_grad(), contextlib.ExitStack() as stack:
            fake_args = [_fake(arg, cast_to, region) for arg in args]
            fake_kwargs = {key: _fake(value, None, region) for key, value in kwargs.items()}
            if under_autocast:
                stack.enter_context(torch.autocast(region[0], dtype=region[1]))
            else:
                for device in sorted(devices):
                    stack.enter_context(torch.autocast(device, enabled=False))
            result = op.resolve()(*fake_args, **fake_kwargs)
    except NotConstant:
        raise
    except Exception:  # noqa: BLE001 - the op does not take these arguments
        return None
    items = result if isinstance(result, tuple | list) else (result,)
    return tuple(item.dtype if isinstance(item, torch.Tensor) else None for item in items)


def autocast_arguments(
    tracer: Tracer,
    op: OpRef,
    args: tuple[Var, ...],
    kwargs: Mapping[str, Var],
    region: Region,
    lower_precision: bool,
) -> tuple[Var, ...]:
    """``args`` of ``op`` with the casts that give eager's result dtypes under autocast
    in ``region`` (``lower_precision``: ``op`` is known to run in the region's dtype, so
    that is tried first). Raises :class:`AutocastMismatch` when no casts do."""
    tensors = [t for arg in (*args, *kwargs.values()) for t in _tensors(arg)]
    if not any(t.meta.device.type == region[0] for t in tensors):
        return args  # autocast acts through the tensors of its device type only
    try:
        key: Any = (
            op,
            tuple(_key(arg) for arg in args),
            tuple((name, _key(value)) for name, value in kwargs.items()),
            region,
            lower_precision,
            torch.get_default_dtype(),
        )
        hash(key)
    except (TypeError, NotConstant):
        key = None
    if key is not None and key in _CHOICES:
        choice = _CHOICES[key]
    else:
        choice = _choose(op, args, kwargs, region, lower_precision)
        if key is not None:
            if len(_CHOICES) >= MAX_CHOICES:
                _CHOICES.clear()
            _CHOICES[key] = choice
    if isinstance(choice, str):
        raise AutocastMismatch(choice)
    return _cast_all(tracer, args, region, choice)


def _choose(
    op: OpRef,
    args: tuple[Var, ...],
    kwargs: Mapping[str, Var],
    region: Region,
    lower_precision: bool,
) -> torch.dtype | str | None:
    """The cast target for :func:`autocast_arguments` (None: no casts), or why there is
    none."""
    try:
        truth = _result_dtypes(op, args, kwargs, region, None, under_autocast=True)
        if truth is None:
            return f"{op.name} fails on fake tensors under autocast"
        targets: list[torch.dtype | None] = [region[1]] if lower_precision else []
        targets.append(None)
        targets += [d for d in truth if isinstance(d, torch.dtype) and d.is_floating_point]
        for target in dict.fromkeys(targets):
            if _result_dtypes(op, args, kwargs, region, target, under_autocast=False) == truth:
                return target
    except NotConstant:
        return f"{op.name} under autocast with non-constant arguments"
    return (
        f"{op.name} under autocast({region[0]}, {region[1]}): no casts of its arguments "
        f"give eager's result dtypes {truth}"
    )


def _cast_all(
    tracer: Tracer, args: tuple[Var, ...], region: Region, target: torch.dtype | None
) -> tuple[Var, ...]:
    if target is None:
        return args
    return tuple(_cast(tracer, arg, region, target) for arg in args)


def _cast(tracer: Tracer, var: Var, region: Region, target: torch.dtype) -> Var:
    if isinstance(var, TensorVar):
        if not _eligible(var.meta, region, target):
            return var
        return tracer.call_op(CAST, (var, ConstVar(target)), {})
    if isinstance(var, SequenceVar):
        return SequenceVar([_cast(tracer, item, region, target) for item in var.items], var.is_list)
    return var
