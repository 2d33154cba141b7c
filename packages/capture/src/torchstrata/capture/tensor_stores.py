"""``tensor[index] = value``: item assignment on tensors, as in-place ops the graph keeps.

- ints, slices, None and ``...``: the view those index (``torch.select``/``narrow``...),
  then ``fill_`` (a number) or ``copy_`` (a tensor, broadcast and cast as eager does);
- a boolean mask alone: ``masked_fill_`` for a number or a 0-dim tensor; a tensor that
  broadcasts over the unmasked dimensions is ``torch.where(mask, value, tensor)``
  copied back (a value with one row per selected element depends on the mask's data);
- integer index tensors, mixed with ints, slices and ``...``: the view the ints and
  slices make (ints select first, as eager's ``__setitem__`` applies them), then
  ``index_put_`` with None for each sliced dimension, the value cast to the tensor's
  dtype.

The graph keeps eager's aliasing (see :meth:`Tracer._note_inplace`): a write through a
view of an input or of an intermediate is seen by the base, and the autograd stage
functionalises it (a view's chain replayed on its base's new value), gradients included.
"""

from __future__ import annotations

import torch

from torchstrata.capture.indexing import basic_index, index_elements
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import ConstVar, SequenceVar, TensorVar, Var, describe
from torchstrata.core import OpKind, OpRef, torch_op

_FILL = OpRef(OpKind.TORCH, "torch.Tensor.fill_")
_COPY = OpRef(OpKind.TORCH, "torch.Tensor.copy_")
_MASKED_FILL = OpRef(OpKind.TORCH, "torch.Tensor.masked_fill_")
#: The ATen op, whose indices may hold None (the Tensor method's may not).
_INDEX_PUT = OpRef(OpKind.TORCH, "torch.ops.aten.index_put_.default")
_TO = OpRef(OpKind.TORCH, "torch.Tensor.to")
_VIEW = OpRef(OpKind.TORCH, "torch.Tensor.view")
_WHERE = torch_op(torch.where)
_FULL = torch_op(torch.full)
assert _WHERE is not None and _FULL is not None


def store_tensor_items(tracer: Tracer, tensor: TensorVar, index: Var, value: Var) -> None:
    """``tensor[index] = value`` (see the module docstring)."""
    if not (isinstance(value, TensorVar) or _is_number(value)):
        raise Unsupported(f"assigning {describe(value)} into a tensor is not supported yet")
    elements = index_elements(index)
    tensors = [element for element in elements if isinstance(element, TensorVar)]
    if not tensors:
        values = [_basic_element(element) for element in elements]
        view = basic_index(tracer, tensor, values)
        assert isinstance(view, TensorVar)
        op = _COPY if isinstance(value, TensorVar) else _FILL
        tracer.call_op(op, (view, value), {})
        return
    if any(t.meta.dtype == torch.bool for t in tensors):
        if len(elements) != 1:
            raise Unsupported("a boolean mask mixed with other indices in an assignment")
        _store_masked(tracer, tensor, tensors[0], value)
        return
    _store_indexed(tracer, tensor, elements, value)


def _is_number(var: Var) -> bool:
    return isinstance(var, ConstVar) and type(var.value) in (int, float, bool)


def _basic_element(element: Var) -> object:
    if not isinstance(element, ConstVar) or isinstance(element.value, bool):
        raise Unsupported(f"assigning into a tensor indexed by {describe(element)}")
    # a SymInt: a symbolic position (an int argument, decision 0330) selects as an int
    if not isinstance(element.value, int | torch.SymInt | slice | type(None) | type(Ellipsis)):
        raise Unsupported(f"assigning into a tensor indexed by {describe(element)}")
    return element.value


def _store_masked(tracer: Tracer, tensor: TensorVar, mask: TensorVar, value: Var) -> None:
    ndim, mask_ndim = tensor.meta.ndim, mask.meta.ndim
    if tuple(mask.meta.shape) != tuple(tensor.meta.shape[:mask_ndim]):
        raise Unsupported("a boolean mask whose shape does not match the tensor's leading dims")
    if mask_ndim < ndim:  # the mask covers leading dimensions: broadcast it over the rest
        broadcast = ConstVar((*mask.meta.shape, *([1] * (ndim - mask_ndim))))
        mask = tracer.call_op(_VIEW, (mask, broadcast), {})  # type: ignore[assignment]
    if not isinstance(value, TensorVar) or value.meta.ndim == 0:
        tracer.call_op(_MASKED_FILL, (tensor, mask, value), {})
        return
    rest = tensor.meta.shape[mask_ndim:]
    shape = list(value.meta.shape)
    while shape and shape[0] == 1:
        shape.pop(0)
    if len(shape) > len(rest) or any(s not in (1, r) for s, r in zip(shape[::-1], rest[::-1])):
        raise Unsupported(
            "assigning a tensor through a boolean mask, one row per selected element: its "
            "shape depends on the mask's values"
        )
    merged = tracer.call_op(_WHERE, (mask, value, tensor), {})  # type: ignore[arg-type]
    tracer.call_op(_COPY, (tensor, merged), {})


def _store_indexed(tracer: Tracer, tensor: TensorVar, elements: list[Var], value: Var) -> None:
    for element in elements:
        basic = isinstance(element, ConstVar) and (
            isinstance(element.value, slice | type(Ellipsis))
            or (
                isinstance(element.value, int | torch.SymInt)
                and not isinstance(element.value, bool)
            )
        )
        if not (basic or isinstance(element, TensorVar)):
            raise Unsupported(
                f"assigning into a tensor with index tensors mixed with {describe(element)}"
            )
    ellipses = [i for i, e in enumerate(elements) if isinstance(e, ConstVar) and e.value is ...]
    if len(ellipses) > 1:
        raise Unsupported("an index can only have a single ellipsis")
    if ellipses:
        fill = [ConstVar(slice(None))] * (tensor.meta.ndim - len(elements) + 1)
        elements = [*elements[: ellipses[0]], *fill, *elements[ellipses[0] + 1 :]]
    # ints select (their dim goes, as eager's __setitem__ applies them before the
    # index tensors), slices narrow (their dim stays: None in the index list)
    slices = [e.value if isinstance(e, ConstVar) else slice(None) for e in elements]
    sliced = basic_index(tracer, tensor, slices)
    assert isinstance(sliced, TensorVar)
    indices: list[Var] = [
        ConstVar(None) if isinstance(e, ConstVar) else e
        for e in elements
        if not (isinstance(e, ConstVar) and isinstance(e.value, int | torch.SymInt))
    ]
    while indices and isinstance(indices[-1], ConstVar):
        indices.pop()
    meta = tensor.meta
    if isinstance(value, TensorVar):
        if value.meta.dtype != meta.dtype:
            value = tracer.call_op(_TO, (value, ConstVar(meta.dtype)), {})
    else:
        kwargs = {"dtype": ConstVar(meta.dtype), "device": ConstVar(meta.device)}
        value = tracer.call_op(_FULL, (ConstVar(()), value), kwargs)  # type: ignore[arg-type]
    tracer.call_op(_INDEX_PUT, (sliced, SequenceVar(indices, is_list=True), value), {})
