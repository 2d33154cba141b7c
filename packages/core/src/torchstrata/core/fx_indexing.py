"""Tensor views that an FX graph records as Python operations, imported as the ops that
capture lowers the same code to.

* ``tensor[index]`` (``operator.getitem`` on a tensor, as Dynamo records
  ``x[: n // 2, 1:]``): ``torch.select`` for an int, ``torch.unsqueeze`` for None,
  ``aten.slice.Tensor`` for a slice (its bounds may be symbolic sizes), ``...``
  expanded; one tensor index is ``operator.getitem`` itself.
* ``getattr(tensor, name)`` (Dynamo's ``x.T``): ``T``, ``mT``, ``real``, ``imag``.

Anything else is refused by name."""

from __future__ import annotations

from typing import Any

import torch

from torchstrata.core.builder import GraphBuilder
from torchstrata.core.graph import Node
from torchstrata.core.meta import TensorMeta
from torchstrata.core.ops import OpKind, OpRef, torch_op

_SELECT = torch_op(torch.select)
_UNSQUEEZE = torch_op(torch.unsqueeze)
_SLICE = OpRef(OpKind.TORCH, "torch.ops.aten.slice.Tensor")
_TENSOR_GETITEM = OpRef(OpKind.TORCH, "operator.getitem")
_PERMUTE = torch_op(torch.Tensor.permute)
_TRANSPOSE = torch_op(torch.Tensor.transpose)
_PARTS = {"real": torch_op(torch.real), "imag": torch_op(torch.imag)}


class TensorIndexError(ValueError):
    """A tensor subscript that the import does not lower (the message names it)."""


def _is_tensor(value: Any) -> bool:
    return isinstance(value, Node) and isinstance(value.meta, TensorMeta)


def _is_size(value: Any) -> bool:
    return value is None or (isinstance(value, int | torch.SymInt) and not isinstance(value, bool))


def expand_index(elements: list[Any], ndim: int) -> list[Any]:
    """The elements of a basic subscript of a tensor of rank ``ndim`` (ints, slices,
    None, ``...``) with ``...`` replaced by the full slices it stands for; shared by the
    FX import and capture's ``basic_index``.

    :raises TensorIndexError: more than one ``...``.
    """
    if sum(element is Ellipsis for element in elements) > 1:
        raise TensorIndexError("an index can only have a single ellipsis")
    consuming = sum(1 for e in elements if e is not None and e is not Ellipsis)
    expanded: list[Any] = []
    for element in elements:
        fill = [slice(None)] * max(ndim - consuming, 0)
        expanded += fill if element is Ellipsis else [element]
    return expanded


def index_dims(expanded: list[Any]) -> list[tuple[int, Any]]:
    """(dimension of the result so far, element) for each element of an expanded basic
    subscript (:func:`expand_index`), in order: a None inserts a dimension there, an int
    removes the one it indexes, a slice keeps it."""
    dims: list[tuple[int, Any]] = []
    dim = 0
    for element in expanded:
        dims.append((dim, element))
        if element is None or isinstance(element, slice):
            dim += 1
    return dims


def index_tensor(builder: GraphBuilder, source: Node, index: Any, name: str) -> Node:
    """``source[index]`` appended to ``builder`` (see the module docstring); the last
    node is called ``name``.

    :raises TensorIndexError: an index of another kind (a tensor mixed with other
        elements, a list, a non-positive step, more than one ``...``).
    """
    if _is_tensor(index):
        return builder.call(_TENSOR_GETITEM, source, index, name=name)
    elements = list(index) if isinstance(index, tuple) else [index]
    for element in elements:
        if isinstance(element, slice):
            bounds = (element.start, element.stop, element.step)
            if not all(map(_is_size, bounds)):
                raise TensorIndexError(f"a tensor slice with bounds {bounds} is not supported")
            if isinstance(element.step, int) and element.step <= 0:
                raise TensorIndexError("a tensor slice with a non-positive step")
        elif not (_is_size(element) or element is Ellipsis):
            raise TensorIndexError(
                f"indexing a tensor with {type(element).__name__} is not supported"
            )
    assert isinstance(source.meta, TensorMeta) and _SELECT and _UNSQUEEZE
    expanded = expand_index(elements, source.meta.ndim)
    consuming = sum(1 for e in elements if e is not None and e is not Ellipsis)
    if consuming > source.meta.ndim:
        raise TensorIndexError(f"too many indices for a tensor of dimension {source.meta.ndim}")
    steps: list[tuple[OpRef, tuple[Any, ...]]] = []
    for dim, element in index_dims(expanded):
        if element is None:
            steps.append((_UNSQUEEZE, (dim,)))
        elif isinstance(element, slice):
            if (element.start, element.stop, element.step) != (None, None, None):
                start = 0 if element.start is None else element.start
                step = 1 if element.step is None else element.step
                steps.append((_SLICE, (dim, start, element.stop, step)))
        else:
            steps.append((_SELECT, (dim, element)))
    result = source
    for position, (op, args) in enumerate(steps):
        last = position == len(steps) - 1
        result = builder.call(op, result, *args, name=name if last else None)
    if result is source:  # x[:] or x[...]: a view of the whole tensor
        result = builder.call(_SLICE, source, 0, 0, None, 1, name=name)
    return result


def tensor_attribute(builder: GraphBuilder, source: Node, name: str, node_name: str) -> Node:
    """``getattr(source, name)`` for a view attribute of a tensor (see the module
    docstring), the node called ``node_name``.

    :raises TensorIndexError: another attribute.
    """
    assert isinstance(source.meta, TensorMeta) and _PERMUTE and _TRANSPOSE
    if name == "T":
        dims = tuple(reversed(range(source.meta.ndim)))
        return builder.call(_PERMUTE, source, dims, name=node_name)
    if name == "mT":
        return builder.call(_TRANSPOSE, source, -2, -1, name=node_name)
    part = _PARTS.get(name)
    if part is not None:
        return builder.call(part, source, name=node_name)
    raise TensorIndexError(f"the tensor attribute {name!r} is not supported")
