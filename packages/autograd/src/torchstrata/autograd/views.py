"""View steps: replaying a view on a new base, and writing a view's new value back.

A tensor that aliases a base is described by the chain of ATen view calls that made it
from the base (:class:`ViewStep`). After an in-place write to the base, the view is
*regenerated* by replaying its chain on the base's new value. After an in-place write to
the view, the new value is *scattered* back into the base step by step
(``select`` → ``select_scatter``, ``transpose`` → ``transpose``, ``view`` → ``view``...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import attrs
import torch

from torchstrata.autograd.functional import bind_arguments
from torchstrata.core import Node


class Value(NamedTuple):
    """A traced value: its fake tensor (for metadata) and the node that computes it."""

    fake: torch.Tensor
    node: Node


#: ``emit(func, *args, index=None, **kwargs) -> Value``: run ``func`` on the fake tensors
#: of the :class:`Value` arguments and record it on their nodes (``index`` picks one
#: tensor of a tuple result).
Emit = Callable[..., Value]

aten = torch.ops.aten

#: View ops that only reshape (or alias): their inverse is a view back to the parent shape.
_RESHAPES = frozenset(
    {"view", "_unsafe_view", "_reshape_alias", "squeeze", "unsqueeze", "view_as", "flatten"}
)
_ALIASES = frozenset({"alias", "detach", "lift_fresh"})


@attrs.frozen
class ViewStep:
    """One view call ``func(parent, *args[1:], **kwargs)`` (``index`` for tuple results)."""

    func: torch._ops.OpOverload
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    index: int | None = None

    @property
    def name(self) -> str:
        """The op's packet name without namespace (``transpose``, ``select``)."""
        return self.func._overloadpacket.__name__

    def replay(self, emit: Emit, parent: Value) -> Value:
        """Apply this view to ``parent`` (a new value of the parent tensor)."""
        if any(isinstance(arg, torch.Tensor) for arg in self.args[1:]):
            raise NotImplementedError(f"view op {self.func.name()} takes a second tensor")
        return emit(self.func, parent, *self.args[1:], index=self.index, **self.kwargs)

    def scatter(self, emit: Emit, parent: Value, value: Value) -> Value:
        """The new value of the parent once this view of it holds ``value``."""
        name = self.name
        bound = bind_arguments(self.func, self.args, self.kwargs)
        if name in _ALIASES:
            return value
        if name in _RESHAPES:
            return _view_as_shape(emit, value, tuple(parent.fake.shape))
        if name == "transpose":
            return emit(aten.transpose.int, value, bound["dim0"], bound["dim1"])
        if name in ("t", "numpy_T", "mT"):
            return emit(aten.t.default, value)
        if name == "permute":
            dims = [d % parent.fake.dim() for d in bound["dims"]]
            inverse = sorted(range(len(dims)), key=dims.__getitem__)
            return emit(aten.permute.default, value, inverse)
        if name == "select":
            return emit(aten.select_scatter.default, parent, value, bound["dim"], bound["index"])
        if name == "slice":
            return emit(
                aten.slice_scatter.default,
                parent,
                value,
                bound["dim"],
                bound["start"],
                bound["end"],
                bound["step"],
            )
        if name == "diagonal":
            return emit(
                aten.diagonal_scatter.default,
                parent,
                value,
                bound["offset"],
                bound["dim1"],
                bound["dim2"],
            )
        if name == "unbind":
            return emit(aten.select_scatter.default, parent, value, bound["dim"], self.index)
        if name in ("split", "split_with_sizes"):
            return self._scatter_split(emit, parent, value, bound)
        if name == "as_strided":
            return emit(
                aten.as_strided_scatter.default,
                parent,
                value,
                bound["size"],
                bound["stride"],
                bound["storage_offset"],
            )
        raise NotImplementedError(
            f"writing through a view made by {self.func.name()} is not supported"
        )

    def _scatter_split(self, emit: Emit, parent: Value, value: Value, bound: dict) -> Value:
        assert self.index is not None
        dim = bound["dim"] % parent.fake.dim()
        if self.name == "split":
            size = bound["split_size"]
            start = self.index * size
        else:
            start = sum(bound["split_sizes"][: self.index])
        end = start + value.fake.shape[dim]
        return emit(aten.slice_scatter.default, parent, value, dim, start, end, 1)


def _view_as_shape(emit: Emit, value: Value, shape: tuple[int, ...]) -> Value:
    if tuple(value.fake.shape) == shape:
        return value
    try:
        return emit(aten.view.default, value, list(shape))
    except RuntimeError:
        contiguous = emit(aten.clone.default, value, memory_format=torch.contiguous_format)
        return emit(aten.view.default, contiguous, list(shape))
