"""Finding the functional ATen overload that stands for a mutating one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import torch

#: Mutating ops whose functional variant does not follow a naming rule.
_FUNCTIONAL_VARIANTS = {
    "aten::native_batch_norm": "_native_batch_norm_legit_functional.default",
}


#: Ops that may write arguments their schema does not mark (see :func:`hidden_writes`).
HIDDEN_WRITERS = frozenset(
    {"aten::native_batch_norm", "aten::cudnn_batch_norm", "aten::miopen_batch_norm"}
)


def written_arguments(func: torch._ops.OpOverload) -> list[str]:
    """Names of the schema arguments ``func`` writes to (``self`` for ``add_``, ``out``...)."""
    return [
        argument.name
        for argument in func._schema.arguments
        if argument.alias_info is not None and argument.alias_info.is_write
    ]


def hidden_writes(func: torch._ops.OpOverload, bound: Mapping[str, Any]) -> list[str]:
    """Arguments ``func`` writes although its schema does not say so.

    ``native_batch_norm`` (and the cuDNN/MIOpen variants) update ``running_mean`` and
    ``running_var`` in training mode but declare them as plain ``Tensor?``.
    """
    if func.name() in HIDDEN_WRITERS and bound.get("training"):
        return [name for name in ("running_mean", "running_var") if bound.get(name) is not None]
    return []


def bind_arguments(
    func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """Schema argument name to value for one call, defaults filled in where known."""
    bound: dict[str, Any] = {}
    for index, argument in enumerate(func._schema.arguments):
        if index < len(args) and not argument.kwarg_only:
            bound[argument.name] = args[index]
        elif argument.name in kwargs:
            bound[argument.name] = kwargs[argument.name]
        elif argument.has_default_value():
            bound[argument.name] = argument.default_value
        else:
            bound[argument.name] = None
    return bound


@attrs.frozen
class FunctionalForm:
    """How to compute a mutating call functionally.

    ``op`` is called with the same arguments. With ``returns_self`` (``add_`` → ``add``)
    its one result is the new value of ``written[0]``; otherwise (``native_batch_norm``
    → ``_native_batch_norm_legit_functional``) it returns the original results followed
    by the new value of each argument in ``written``.
    """

    op: torch._ops.OpOverload
    written: tuple[str, ...]
    returns_self: bool


def _overload(packet_name: str, overload: str) -> torch._ops.OpOverload | None:
    packet = getattr(torch.ops.aten, packet_name, None)
    if packet is None or overload not in packet.overloads():
        return None
    return getattr(packet, overload)


def _same_arguments(func: torch._ops.OpOverload, candidate: torch._ops.OpOverload) -> bool:
    """Whether both take the same arguments: names and types (``pow_.Scalar`` takes a
    tensor ``self`` and a scalar exponent, ``pow.Scalar`` a scalar ``self``)."""

    def signature(op: torch._ops.OpOverload) -> list[tuple[str, str]]:
        return [(argument.name, str(argument.type)) for argument in op._schema.arguments]

    return signature(func) == signature(candidate)


def _inplace_counterpart(
    func: torch._ops.OpOverload, packet: str, overload: str
) -> torch._ops.OpOverload | None:
    """``add_.Tensor`` → ``add.Tensor``; ``bernoulli_.float`` → ``bernoulli.p``;
    ``pow_.Scalar`` → ``pow.Tensor_Scalar``; ``normal_`` → ``normal_functional`` (the
    same arguments)."""
    functional_name = packet.removesuffix("_")
    found = _overload(functional_name, overload or "default")
    if found is not None and not written_arguments(found) and _same_arguments(func, found):
        return found
    for name in (functional_name, f"{functional_name}_functional"):
        packet_object = getattr(torch.ops.aten, name, None)
        if packet_object is None:
            continue
        for overload_name in packet_object.overloads():
            candidate = getattr(packet_object, overload_name)
            if not written_arguments(candidate) and _same_arguments(func, candidate):
                return candidate
    return None


def view_counterpart(func: torch._ops.OpOverload) -> torch._ops.OpOverload:
    """The view op that an in-place view op (``squeeze_``, ``t_``, ``transpose_``...)
    applies to its tensor: ``aten.squeeze_.dim`` gives ``aten.squeeze.dim``.

    :raises NotImplementedError: when there is none with the same arguments, or the
        counterpart is not a view: ``resize_`` (tagged as an in-place view) may move its
        tensor to new memory, away from the views taken before it.
    """
    qualified = func.name()
    _, _, rest = qualified.partition("::")
    packet, _, overload = rest.partition(".")
    found = _inplace_counterpart(func, packet, overload) if packet.endswith("_") else None
    if found is None or not found.is_view:
        raise NotImplementedError(f"in-place view op {qualified} has no view counterpart")
    return found


def functional_form(
    func: torch._ops.OpOverload, written: list[str] | None = None
) -> FunctionalForm:
    """The functional form of the mutating ATen overload ``func``.

    ``aten.add_.Tensor`` gives ``aten.add.Tensor``, ``aten.copy_.default`` gives
    ``aten.copy.default``, ``aten.bernoulli_.float`` gives ``aten.bernoulli.p``, and
    ``aten.native_batch_norm.default`` (which updates the running statistics) gives
    ``aten._native_batch_norm_legit_functional.default``.

    :raises NotImplementedError: for ``out=`` overloads, in-place view ops (``t_``: see
        :func:`view_counterpart`) and ops with no functional variant.
    """
    qualified = func.name()
    namespace, _, rest = qualified.partition("::")
    packet, _, overload = rest.partition(".")
    written_names = tuple(written_arguments(func) if written is None else written)
    # torch.Tag.out does not exist before torch 2.12; the argument names catch those ops too.
    if (
        namespace != "aten"
        or getattr(torch.Tag, "out", None) in func.tags
        or "out" in written_names
    ):
        raise NotImplementedError(
            f"mutating op {qualified} (writes {', '.join(written_names) or 'nothing'}) has no "
            "functional form here; out= overloads are not supported"
        )
    if torch.Tag.inplace_view in func.tags:
        raise NotImplementedError(f"in-place view op {qualified} is not supported")
    if written_names == ("self",) and packet.endswith("_"):
        functional = _inplace_counterpart(func, packet, overload)
        if functional is not None:
            return FunctionalForm(functional, written_names, returns_self=True)
    variant = _FUNCTIONAL_VARIANTS.get(f"{namespace}::{packet}")
    if variant is None:
        variant = f"{packet}_functional.{overload or 'default'}"
    found = _overload(*variant.split("."))
    if found is not None and not written_arguments(found):
        return FunctionalForm(found, written_names, returns_self=False)
    raise NotImplementedError(f"mutating op {qualified} has no functional ATen counterpart")
