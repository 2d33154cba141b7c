"""The Python types of tuples that torch ops and user code return.

A torch op that returns several tensors returns a *structseq* (``torch.return_types.max``:
a tuple subclass whose fields are C member descriptors) or, for some Python-level
functions, a ``collections.namedtuple``. Capture records the class and its field names,
so ``x.max(1).values`` resolves at capture time and the value the compiled function
returns (or leaves live at a graph break) is rebuilt as the same class eager gives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from torchstrata.core import Node, OpRef, TensorMeta, has_symbols, size_hint


@attrs.frozen
class TupleType:
    """A named tuple class and its field names, in item order."""

    cls: type
    field_names: tuple[str, ...]


def is_structseq_class(cls: type) -> bool:
    """A C struct sequence class (``torch.return_types.*``, ``os.stat_result``)."""
    return (
        isinstance(cls, type)
        and issubclass(cls, tuple)
        and hasattr(cls, "n_sequence_fields")
        and hasattr(cls, "n_fields")
    )


def is_namedtuple_class(cls: Any) -> bool:
    """A class made by ``collections.namedtuple`` or ``typing.NamedTuple``."""
    return (
        isinstance(cls, type)
        and issubclass(cls, tuple)
        and isinstance(getattr(cls, "_fields", None), tuple)
        and callable(getattr(cls, "_make", None))
    )


def structseq_fields(value: tuple[Any, ...]) -> tuple[str, ...] | None:
    """The field names of a structseq instance, in item order, or None where they cannot
    be told apart (two fields holding the same object)."""
    cls = type(value)
    names = [
        name for name, member in vars(cls).items() if type(member).__name__ == "member_descriptor"
    ]
    by_index: dict[int, str] = {}
    for name in names:
        field = getattr(value, name)
        for index, item in enumerate(value):
            if item is field:
                by_index[index] = name
    if sorted(by_index) != list(range(len(value))):
        return None
    return tuple(by_index[index] for index in range(len(value)))


def tuple_type_of(value: Any) -> TupleType | None:
    """The :class:`TupleType` of a named tuple or structseq ``value``; None for a plain
    tuple or one whose fields cannot be named."""
    cls = type(value)
    if cls is tuple or not isinstance(value, tuple):
        return None
    if is_namedtuple_class(cls):
        return TupleType(cls, tuple(cls._fields))
    if is_structseq_class(cls):
        fields = structseq_fields(value)
        return TupleType(cls, fields) if fields is not None else None
    return None


def make_tuple(cls: type | None, values: Sequence[Any]) -> tuple[Any, ...]:
    """``values`` as an instance of ``cls`` (None: a plain tuple). A structseq takes one
    sequence; a namedtuple takes its fields as arguments."""
    if cls is None or cls is tuple:
        return tuple(values)
    if is_structseq_class(cls):
        return cls(tuple(values))
    return cls(*values)


def _meta_value(value: Any) -> Any:
    if isinstance(value, Node) and isinstance(value.meta, TensorMeta):
        meta = value.meta
        if has_symbols(tuple(meta.shape)) or has_symbols(tuple(meta.strides)):
            # the type does not depend on sizes: a meta tensor of the hints, so that no
            # symbol is specialised (torch 2.14 guards a symbolic meta tensor's sizes)
            shape, strides = (
                tuple(map(size_hint, meta.shape)),
                tuple(map(size_hint, meta.strides)),
            )
            return torch.empty_strided(shape, strides, dtype=meta.dtype, device="meta")
        return meta.to_meta_tensor()
    if isinstance(value, list | tuple):
        return type(value)(_meta_value(item) for item in value)
    return value


def op_result_type(op: OpRef, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TupleType | None:
    """The tuple class ``op`` returns for these graph arguments, found by running it on
    meta tensors; None for a plain tuple or when the op cannot run on meta tensors
    (meta inference of the node already succeeded by then, through ATen)."""
    resolved: Callable[..., Any] = op.resolve()
    try:
        result = resolved(
            *_meta_value(args), **{key: _meta_value(item) for key, item in kwargs.items()}
        )
    except Exception:  # noqa: BLE001 - the type is a nicety; the values are known already
        return None
    return tuple_type_of(result)
