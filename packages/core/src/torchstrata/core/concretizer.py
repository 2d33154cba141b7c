"""Making symbolic values static: every symbolic size in a value (metadata, arguments,
nested containers) replaced by its value for one call's sizes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import torch

from torchstrata.core.meta import TensorMeta
from torchstrata.core.symbolic import SYMBOLIC_TYPES, evaluate


def concretize(value: Any, values: Mapping[str, int]) -> Any:
    """``value`` with every symbolic scalar in it replaced by its value under ``values``
    (symbol name -> int; through tuples, lists, dicts, ``torch.Size`` and attrs metadata)."""
    return Concretizer(values)(value)


#: Argument types that hold no symbol (returned as they are by :class:`Concretizer`).
_PLAIN_TYPES = frozenset({int, float, bool, str, type(None)})


class Concretizer:
    """:func:`concretize` for one call's ``values``, over many values (a whole graph):
    each distinct size expression is evaluated once, and each metadata object and
    symbolic scalar (nodes share them) made static once. The memo is by object identity
    (the object is kept alive with its result), then by the sympy expression and scalar
    type for symbolic scalars: :func:`~torchstrata.core.symbolic.evaluate` is a function of exactly those and ``values``
    (decision 0320)."""

    def __init__(self, values: Mapping[str, int]) -> None:
        self.values = values
        self._scalars: dict[tuple[type, Any], Any] = {}
        self._objects: dict[int, tuple[Any, Any]] = {}

    def scalar(self, value: Any) -> Any:
        """What the symbolic scalar ``value`` becomes: its value under :attr:`values`
        (a subclass may give another value of it: ``core.size_values``)."""
        return evaluate(value, self.values)

    def _sizes(self, sizes: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(size if type(size) is int else self(size) for size in sizes)

    def __call__(self, value: Any) -> Any:
        """``value`` with every symbolic scalar in it replaced by its value."""
        kind = type(value)
        if kind in _PLAIN_TYPES:
            return value
        if kind is TensorMeta:  # most values: every node's metadata
            made = self._objects.get(id(value))
            if made is None:
                result = kind(
                    self._sizes(value.shape),
                    value.dtype,
                    value.device,
                    self._sizes(value.strides),
                    value.requires_grad,
                )
                made = self._objects[id(value)] = (value, result)
            return made[1]
        if isinstance(value, SYMBOLIC_TYPES):
            made = self._objects.get(id(value))  # graphs share their size objects
            if made is not None:
                return made[1]
            key = (kind, value.node.expr)
            found = self._scalars.get(key, _MISSING)
            if found is _MISSING:
                found = self._scalars[key] = self.scalar(value)
            self._objects[id(value)] = (value, found)
            return found
        if isinstance(value, torch.Size):
            return torch.Size(self(item) for item in value)
        if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
            return kind(self(item) for item in value)
        if isinstance(value, dict):
            return {key: self(item) for key, item in value.items()}
        if kind is slice:  # a subscript's bounds (``x[:, s0 : 2 * s0] = y``)
            return slice(self(value.start), self(value.stop), self(value.step))
        if attrs.has(kind) and getattr(value, "shape", None) is not None:
            made = self._objects.get(id(value))
            if made is not None:
                return made[1]
            changes = {
                field: self(getattr(value, field))
                for field in ("shape", "strides")
                if hasattr(value, field)
            }
            result = attrs.evolve(value, **changes)
            self._objects[id(value)] = (value, result)
            return result
        return value


_MISSING = object()
