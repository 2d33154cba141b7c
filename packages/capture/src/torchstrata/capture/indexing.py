"""Subscripts: ``container[index]`` on tuples, lists, dicts, module containers and tensors.

Basic tensor indexing is lowered to view ops that print and parse in the graph text
form (``torch.select``, ``torch.narrow``, ``torch.unsqueeze``; a stepped slice uses
``torch.ops.aten.slice.Tensor``); a single tensor index is ``operator.getitem``.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from torchstrata.capture.operators import fold, operator_ref
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import (
    ConstVar,
    DictVar,
    NotConstant,
    ObjectVar,
    SequenceVar,
    TensorVar,
    Var,
    describe,
    python_value,
)
from torchstrata.core import OpKind, OpRef, TensorIndexError, expand_index, index_dims, torch_op

_SELECT = torch_op(torch.select)
_NARROW = torch_op(torch.narrow)
_UNSQUEEZE = torch_op(torch.unsqueeze)
_INDEX = OpRef(OpKind.TORCH, "torch.ops.aten.index.Tensor")
_STEPPED_SLICE = OpRef(OpKind.TORCH, "torch.ops.aten.slice.Tensor")


class KeyMissing(Unsupported):
    """A dict has no such key (a ``try``/``except KeyError`` in the trace may catch it)."""

    python_exception = KeyError


def subscript(tracer: Tracer, container: Var, index: Var) -> Var:
    """``container[index]``."""
    if isinstance(container, TensorVar):
        return _index_tensor(tracer, container, index)
    try:
        key = python_value(index)
    except NotConstant:
        raise Unsupported(
            f"indexing {describe(container)} with {describe(index)} is not supported"
        ) from None
    if isinstance(container, SequenceVar):
        if container.is_deque and not isinstance(key, int):
            raise Unsupported(f"deque index must be an int, not {type(key).__name__}")
        try:
            picked = container.items[key]
        except (IndexError, TypeError) as error:
            raise Unsupported(
                f"indexing a sequence raised {type(error).__name__}: {error}"
            ) from None
        if isinstance(key, slice):
            return SequenceVar(list(picked), is_list=container.is_list)
        return picked
    if isinstance(container, DictVar):
        if key not in container.items:
            raise KeyMissing(f"dict lookup raised KeyError: {key!r}")
        return container.items[key]
    if isinstance(container, ConstVar):
        return fold(operator.getitem, container.value, key)
    if isinstance(container, ObjectVar):
        try:
            value = container.value[key]
        except Exception as error:  # noqa: BLE001 - the user's exception: let eager raise it
            raise Unsupported(
                f"indexing {describe(container)} raised {type(error).__name__}"
            ) from None
        sliced = isinstance(key, slice)
        source = f"{container.source}[{key!r}]" if container.source else None
        # A slice of a module container is a new object on every call: no identity guard.
        return tracer.wrap(value, source, guard=not sliced)
    raise Unsupported(f"indexing {describe(container)} is not supported")


def store_subscript(tracer: Tracer, container: Var, index: Var, value: Var) -> None:
    """``container[index] = value``: lists and dicts (those that exist outside the trace
    are replayed after the graph, :mod:`.side_effects`), and tensors (in place, through a
    view or ``index_put_``: :mod:`.tensor_stores`)."""
    if isinstance(container, TensorVar):
        from torchstrata.capture.tensor_stores import store_tensor_items  # it imports this

        store_tensor_items(tracer, container, index, value)
        return
    key = python_value(index) if not isinstance(index, TensorVar) else None
    if isinstance(container, SequenceVar) and container.is_list and isinstance(key, int | slice):
        try:
            if isinstance(key, slice):
                from torchstrata.capture.iteration import iterate  # iteration imports this

                container.items[key] = iterate(tracer, value)
            else:
                container.items[key] = value
        except (IndexError, ValueError) as error:
            raise Unsupported(f"list item assignment raised {type(error).__name__}") from None
        _mutated(tracer, container)
        return
    if isinstance(container, DictVar) and key is not None:
        container.items[key] = value
        _mutated(tracer, container)
        return
    raise Unsupported(f"item assignment on {describe(container)} is not supported")


def delete_subscript(tracer: Tracer, container: Var, index: Var) -> None:
    """``del container[index]`` for lists and dicts (arguments too: replayed)."""
    key = python_value(index) if not isinstance(index, TensorVar) else None
    if isinstance(container, SequenceVar) and container.is_list and isinstance(key, int | slice):
        try:
            del container.items[key]
        except IndexError:
            raise Unsupported("del on a list raised IndexError") from None
        _mutated(tracer, container)
        return
    if isinstance(container, DictVar) and key is not None:
        if key not in container.items:
            raise Unsupported(f"del on a dict raised KeyError: {key!r}")
        del container.items[key]
        _mutated(tracer, container)
        return
    raise Unsupported(f"del on an item of {describe(container)} is not supported")


def _mutated(tracer: Tracer, container: SequenceVar | DictVar) -> None:
    """A container that exists outside the trace is replayed after the graph."""
    if container.source is not None:
        tracer.side_effects.mutate_container(container)


def index_elements(index: Var) -> list[Var]:
    """The elements of a subscript: the items of a tuple index, else the index alone."""
    if isinstance(index, SequenceVar) and not index.is_list:
        return list(index.items)
    if isinstance(index, ConstVar) and type(index.value) is tuple:
        return [ConstVar(item) for item in index.value]
    return [index]


def _index_tensor(tracer: Tracer, tensor: TensorVar, index: Var) -> Var:
    elements = index_elements(index)
    if any(isinstance(element, TensorVar) for element in elements):
        if len(elements) == 1:
            return tracer.call_op(operator_ref(operator.getitem), (tensor, elements[0]), {})
        return _advanced_index(tracer, tensor, elements)
    values: list[Any] = []
    for element in elements:
        if not isinstance(element, ConstVar):
            raise Unsupported(f"indexing a tensor with {describe(element)} is not supported yet")
        if isinstance(element.value, bool) or not isinstance(
            element.value, int | torch.SymInt | slice | type(None) | type(Ellipsis)
        ):
            raise Unsupported(f"indexing a tensor with {describe(element)} is not supported yet")
        values.append(element.value)
    return basic_index(tracer, tensor, values)


def _advanced_index(tracer: Tracer, tensor: TensorVar, elements: list[Var]) -> Var:
    """Tensors mixed with slices and ``...``: slice first, then ``aten.index.Tensor``
    with None for every sliced dimension (what Python indexing does)."""
    for element in elements:
        if isinstance(element, ConstVar) and not isinstance(element.value, slice | type(Ellipsis)):
            raise Unsupported(
                f"tensor indices mixed with {describe(element)} are not supported yet"
            )
        if not isinstance(element, ConstVar | TensorVar):
            raise Unsupported(f"indexing a tensor with {describe(element)} is not supported yet")
    ellipses = [i for i, e in enumerate(elements) if isinstance(e, ConstVar) and e.value is ...]
    if len(ellipses) > 1:
        raise Unsupported("an index can only have a single ellipsis")
    if ellipses:
        fill = [ConstVar(slice(None))] * (tensor.meta.ndim - len(elements) + 1)
        elements = [*elements[: ellipses[0]], *fill, *elements[ellipses[0] + 1 :]]
    slices = [e.value if isinstance(e, ConstVar) else slice(None) for e in elements]
    sliced = basic_index(tracer, tensor, slices)
    indices = [None if isinstance(e, ConstVar) else e for e in elements]
    while indices and indices[-1] is None:
        indices.pop()
    items: list[Var] = [ConstVar(None) if i is None else i for i in indices]
    return tracer.call_op(_INDEX, (sliced, SequenceVar(items, is_list=True)), {})


def basic_index(tracer: Tracer, tensor: TensorVar, values: list[Any]) -> Var:
    """``tensor[values]`` for ints, slices, None and ``...``: a chain of view ops."""
    try:  # ``...`` expanded as the FX import expands it (core.expand_index)
        expanded = expand_index(values, tensor.meta.ndim)
    except TensorIndexError as error:
        raise Unsupported(str(error)) from None
    result: Var = tensor
    for dim, value in index_dims(expanded):
        current = result
        assert isinstance(current, TensorVar)
        if value is None:
            result = tracer.call_op(_UNSQUEEZE, (current, ConstVar(dim)), {})  # type: ignore[arg-type]
            continue
        if dim >= current.meta.ndim:
            raise Unsupported(f"too many indices for a tensor of dimension {tensor.meta.ndim}")
        size = current.meta.shape[dim]
        if isinstance(value, int | torch.SymInt):
            if not -size <= value < size:  # on a SymInt: guarded (decision 0330)
                raise Unsupported(
                    f"index {value} is out of bounds for dimension {dim} with size {size}"
                )
            index: int | torch.SymInt
            if isinstance(value, int):
                index = value % size
            else:  # its sign guarded, not a Mod(s, size) the kernels would index by
                index = value if value >= 0 else value + size
            result = tracer.call_op(_SELECT, (current, ConstVar(dim), ConstVar(index)), {})  # type: ignore[arg-type]
            continue
        if _symbolic_slice(size, value):  # symbolic sizes: ATen's slice bounds them
            bounds = (
                0 if value.start is None else value.start,
                size if value.stop is None else value.stop,
                1 if value.step is None else value.step,
            )
            if not isinstance(bounds[2], int) or bounds[2] <= 0:
                raise Unsupported("tensor slices with a non-positive step are not supported")
            sliced = (current, ConstVar(dim), *(ConstVar(bound) for bound in bounds))
            result = tracer.call_op(_STEPPED_SLICE, sliced, {})
            continue
        start, stop, step = value.indices(size)
        if step <= 0:
            raise Unsupported("tensor slices with a non-positive step are not supported")
        if (start, stop, step) != (0, size, 1):
            length = max(0, stop - start)
            if step == 1:
                narrow_args = (current, ConstVar(dim), ConstVar(start), ConstVar(length))
                result = tracer.call_op(_NARROW, narrow_args, {})  # type: ignore[arg-type]
            else:
                args = (
                    current,
                    ConstVar(dim),
                    ConstVar(start),
                    ConstVar(max(stop, start)),
                    ConstVar(step),
                )
                result = tracer.call_op(_STEPPED_SLICE, args, {})
    return result


def _symbolic_slice(size: Any, value: slice) -> bool:
    """Whether a slice's size or bounds are symbolic (``slice.indices`` would
    specialise them; see torchstrata.core.symbolic)."""
    return any(isinstance(v, torch.SymInt) for v in (size, value.start, value.stop, value.step))
