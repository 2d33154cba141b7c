"""Torch functions that update their first argument in place (``torch.relu_(x)``,
``F.leaky_relu_(x)``, ``torch.index_put_(x, ...)``).

A Tensor method named like ``add_`` is in place by convention. A function of ``torch``
or ``torch.nn.functional`` named so is not always recognisable by its name alone, so its
ATen schema decides: the first argument marked written (``Tensor(a!) self``). Recorded as
a pure op instead, such a call would leave its argument's later reads (and, for an
input, the caller's tensor) without the update: a silent wrong result.
"""

from __future__ import annotations

import functools

import torch

from torchstrata.core import OpRef


def is_function_named_in_place(op: OpRef) -> bool:
    """A function of ``torch`` (not a Tensor method) whose name ends in one ``_``."""
    short = op.name.rsplit(".", 1)[-1]
    return (
        op.name.startswith("torch.")
        and not op.name.startswith("torch.Tensor.")
        and short.endswith("_")
        and not short.endswith("__")
    )


def written_first_argument(op: OpRef) -> str:
    """What ``op`` writes in place of its first argument: "tensor", "list" (of tensors,
    as ``torch._foreach_add_``), "unknown" (named like an in-place function, with no ATen
    schema to tell), or "" (nothing: not such a function, or no overload writes it)."""
    if not is_function_named_in_place(op):
        return ""
    written = _first_argument_written(op.name.rsplit(".", 1)[-1])
    return "unknown" if written is None else written


def unsupported_reason(op: OpRef, written: str) -> str:
    """Why the capture cannot record ``op`` (``written`` is "list" or "unknown")."""
    if written == "list":
        return f"{op.name} updates a list of tensors in place: not supported"
    return f"{op.name} looks like an in-place function and no ATen schema says what it writes"


@functools.cache
def _first_argument_written(name: str) -> str | None:
    """ "tensor" or "list" when an overload of ``aten::<name>`` writes its first argument,
    "" when none does, None when there is no such ATen op."""
    try:
        packet = getattr(torch.ops.aten, name)
    except (AttributeError, RuntimeError):
        return None
    kinds = set()
    for overload in packet.overloads():
        arguments = getattr(packet, overload)._schema.arguments
        if not arguments or arguments[0].alias_info is None:
            continue
        if arguments[0].alias_info.is_write:
            is_list = isinstance(arguments[0].type, torch.ListType)
            kinds.add("list" if is_list else "tensor")
    return "list" if "list" in kinds else ("tensor" if kinds else "")
