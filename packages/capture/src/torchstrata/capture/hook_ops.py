"""The two ops that put a Python gradient hook into a graph (decision 0067).

``aten::_torchstrata_grad_hook(Tensor x, int slot) -> Tensor`` is the torch-level node
capture records where the trace registers a hook: in the forward it is the identity (a
copy), and its derivative is the second op, ``aten::_torchstrata_call_grad_hook(Tensor
grad, int slot) -> Tensor``, which calls the Python function of ``slot`` on the gradient
when the backward runs and returns what it returned (the gradient itself for ``None``).
``_torchstrata_grad_hooks`` and ``_torchstrata_call_grad_hooks`` are the same over
``Tensor[]`` (a module's hooks see all their gradients at once).

The forward ops are ``CompositeImplicitAutograd``: they decompose, above autograd, into
an autograd function of ``clone`` calls whose derivative is the call op. The autograd
stage traces them like any op, so its forward records plain clones (which fuse) and the
call op lands in the backward ATen graph, where later stages keep it as an extern call. The
ops live in the ``aten`` namespace because graphs at ATen level name ATen overloads only
(``torchstrata.core`` resolves ``aten.<name>.<overload>``); the leading underscore and
the prefix keep them apart from PyTorch's own.

``slot`` is an index into :data:`HOOKS`, this process's table of hook functions: a graph
holds a number, never a Python object, so it prints, parses and is cached as text. A
compiled graph read from the disk cache calls the slot numbers its capture gave in this
process, where the same graph text means the same hooks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

#: The hook functions by slot: each takes the gradient (a list of them, for the list op)
#: and returns a replacement or None (a list of them).
HOOKS: dict[int, Callable[[Any], Any]] = {}

#: The slot of each hook function already in :data:`HOOKS`, by the key it was added under.
_SLOTS: dict[Any, int] = {}

FORWARD_NAME = "_torchstrata_grad_hook"
CALL_NAME = "_torchstrata_call_grad_hook"
#: The same for several tensors whose gradients one function takes together (a module's
#: backward hooks see every ``grad_input`` at once): ``Tensor[] -> Tensor[]``.
LIST_FORWARD_NAME = "_torchstrata_grad_hooks"
LIST_CALL_NAME = "_torchstrata_call_grad_hooks"

_LOCK = threading.Lock()
_LIBRARY: torch.library.Library | None = None


def slot_for(key: Any, hook: Callable[[Any], Any]) -> int:
    """The slot of ``hook`` (added under ``key`` the first time; a later hook with an
    equal key reuses the slot and must behave the same)."""
    with _LOCK:
        slot = _SLOTS.get(key)
        if slot is None:
            slot = len(HOOKS)
            HOOKS[slot] = hook
            _SLOTS[key] = slot
        return slot


def forward_op() -> Any:
    """``torch.ops.aten._torchstrata_grad_hook.default``, defined on first use (with the
    other three)."""
    _define()
    return getattr(torch.ops.aten, FORWARD_NAME).default


def _define() -> None:
    global _LIBRARY
    with _LOCK:
        if _LIBRARY is not None:
            return
        library = torch.library.Library("aten", "FRAGMENT")
        library.define(f"{FORWARD_NAME}(Tensor x, int slot) -> Tensor")
        library.define(f"{CALL_NAME}(Tensor grad, int slot) -> Tensor")
        library.define(f"{LIST_FORWARD_NAME}(Tensor[] xs, int slot) -> Tensor[]")
        library.define(f"{LIST_CALL_NAME}(Tensor[] grads, int slot) -> Tensor[]")
        # The forward ops decompose (above autograd) into an autograd function of copies:
        # a trace records plain ``aten.clone`` calls, which fuse, and the function's
        # derivative, the call op, which stays one extern call.
        library.impl(FORWARD_NAME, _hook_one, "CompositeImplicitAutograd")
        library.impl(LIST_FORWARD_NAME, _hook_many, "CompositeImplicitAutograd")
        library.impl(CALL_NAME, _call_hook, "CompositeExplicitAutograd")
        library.impl(LIST_CALL_NAME, _call_list_hook, "CompositeExplicitAutograd")
        torch.library.register_fake(f"aten::{CALL_NAME}", _empty_like, lib=library)
        torch.library.register_fake(f"aten::{LIST_CALL_NAME}", _empties, lib=library)
        _LIBRARY = library


class _Hooked(torch.autograd.Function):
    """Copies of tensors whose gradients go through the hook function of ``slot``."""

    @staticmethod
    def forward(ctx: Any, slot: int, many: bool, *xs: torch.Tensor) -> Any:
        ctx.slot = slot
        ctx.many = many
        return tuple(x.clone() for x in xs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        if ctx.many:
            call = getattr(torch.ops.aten, LIST_CALL_NAME).default
            return None, None, *call(list(grads), ctx.slot)
        call = getattr(torch.ops.aten, CALL_NAME).default
        return None, None, call(grads[0], ctx.slot)


def _hook_one(x: torch.Tensor, slot: int) -> torch.Tensor:
    return _Hooked.apply(slot, False, x)[0]


def _hook_many(xs: list[torch.Tensor], slot: int) -> list[torch.Tensor]:
    return list(_Hooked.apply(slot, True, *xs))


def _empty_like(x: torch.Tensor, slot: int) -> torch.Tensor:
    return torch.empty_like(x)


def _empties(xs: list[torch.Tensor], slot: int) -> list[torch.Tensor]:
    return [torch.empty_like(x) for x in xs]


def _call_list_hook(grads: list[torch.Tensor], slot: int) -> list[torch.Tensor]:
    hook = HOOKS.get(slot)
    if hook is None:
        raise RuntimeError(f"torchstrata: no gradient hook in slot {slot} of this process")
    results = list(hook(list(grads)))
    if len(results) != len(grads):
        raise RuntimeError(f"a gradient hook returned {len(results)} gradients for {len(grads)}")
    return [_checked(grad, result) for grad, result in zip(grads, results, strict=True)]


def _call_hook(grad: torch.Tensor, slot: int) -> torch.Tensor:
    hook = HOOKS.get(slot)
    if hook is None:
        raise RuntimeError(f"torchstrata: no gradient hook in slot {slot} of this process")
    return _checked(grad, hook(grad))


def _checked(grad: torch.Tensor, result: Any) -> torch.Tensor:
    """What a hook returned for ``grad``, as the op's output: a new tensor of its shape
    and dtype (None: a copy of ``grad``; an op's output may not alias its input)."""
    if result is None:
        return grad.clone()
    if not isinstance(result, torch.Tensor):
        raise TypeError(f"a gradient hook returned {type(result).__name__}, not a tensor")
    if result.shape != grad.shape or result.dtype != grad.dtype:
        raise RuntimeError(
            f"a gradient hook returned a {result.dtype} tensor of shape {tuple(result.shape)} "
            f"for a {grad.dtype} gradient of shape {tuple(grad.shape)}"
        )
    return result.clone() if result is grad else result
