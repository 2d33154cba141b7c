"""Calls that the compiled graphs cannot take as they come: those run the torch-level
graph eagerly instead, with a :class:`TorchstrataFallbackWarning` (once per graph).

- :func:`alias_safe`: a graph writes an input that shares memory with another input
  of the same call (after a graph break, a tensor and a view of it reach the next
  graph as two inputs; a module's parameter made from a tensor that is also passed as
  an argument); the traced graph reads them as separate values.
- :func:`offset_safe`: an ``as_strided`` reads an input that starts inside its storage;
  its gradient was traced for an input at offset 0.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchstrata.core import TENSOR_TYPES, AotResult, spans_overlap, tensor_byte_span
from torchstrata.runtime.fallback import warn_once
from torchstrata.runtime.runners import GraphRunner


def aliased_write(
    inputs: Sequence[Any],
    mutated: tuple[int, ...],
    others: Sequence[Any] | None = None,
    parameters: Callable[[Sequence[Any]], Sequence[Any]] | None = None,
) -> bool:
    """Whether an input the graph writes (``mutated``) shares memory with another input.

    The traced graph reads each input as a separate value, so a read of the other input
    after the write, or a second write, would miss the update: such a call must run the
    graph eagerly. Inputs share memory when they share a storage and the spans of
    memory their elements lie in overlap (a key and a value cache cut from one buffer do
    not).

    :param others: the inputs to compare with the written ones, not themselves written
        (default: every tensor input that is not written and not an ``nn.Parameter``).
        Costs one storage lookup (0.2 us here) per written input and per other input.
    :param parameters: ``inputs -> the parameters to compare`` (default: every
        ``nn.Parameter`` input that is not written). A model's hundred weights would
        cost more than its guards, so they are looked up only where one may share a
        written input's memory (:func:`_held_elsewhere`): a written input that is a
        parameter itself, or whose storage more tensors hold than the written and other
        inputs in it (``nn.Parameter(buffer)`` or ``weight.data = x`` makes one more).
        That costs one reference count (0.4 us here) per written storage.
    """
    written: dict[int, list[torch.Tensor]] = {}  # storage -> written inputs in it
    storages: dict[int, torch.UntypedStorage] = {}
    for index in mutated:
        tensor = inputs[index]
        if not tensor.numel():
            continue  # no elements to share
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key in written and _overlaps(tensor, written[key]):
            return True  # two written inputs overlap
        written.setdefault(key, []).append(tensor)
        storages[key] = storage
    if not written:
        return False
    if others is None:
        others = _plain_positions(inputs, mutated)(inputs)
    readers: dict[int, list[torch.Tensor]] = {}  # storage -> other inputs in it
    if _shares_written(others, written, readers):
        return True
    if not _held_elsewhere(written, storages, readers):
        return False
    picked = parameters(inputs) if parameters is not None else _parameters(inputs, mutated)
    return _shares_written(picked, written, {})


def _shares_written(
    values: Sequence[Any],
    written: dict[int, list[torch.Tensor]],
    readers: dict[int, list[torch.Tensor]],
) -> bool:
    """Whether one of ``values`` (tensors) overlaps a written input in its storage
    (``written``); adds to ``readers`` those that share a written storage without
    overlapping."""
    for value in values:
        key = value.untyped_storage().data_ptr()
        sharing = written.get(key)
        if sharing is not None and value.numel():
            if _overlaps(value, sharing):
                return True
            readers.setdefault(key, []).append(value)
    return False


def _held_elsewhere(
    written: dict[int, list[torch.Tensor]],
    storages: dict[int, torch.UntypedStorage],
    readers: dict[int, list[torch.Tensor]],
) -> bool:
    """Whether a parameter may hold a written input's storage: a written input is not
    a plain tensor (a parameter: the same one may sit at a position that reads it), or
    its storage's reference count says that more tensors hold it than the written and
    the other inputs in it and the bases they view (:func:`_known_holders`).

    Every tensor holds one reference to its storage, so a parameter over that memory
    (``nn.Parameter(x)``, ``weight.data = x``) adds one; so do a view of the buffer
    that the caller keeps, or a tensor that autograd saved: those cost only the
    parameters' lookups."""
    for key, tensors in written.items():
        for tensor in tensors:
            if type(tensor) not in _PLAIN_TENSORS:  # isinstance(Parameter) costs 0.8 us
                return True
        holders = _storage_holders(storages[key])
        if holders is None:
            return True
        inputs = tensors + readers[key] if key in readers else tensors
        if holders > len(inputs) and holders > _known_holders(key, inputs):
            return True
    return False


def _known_holders(storage: int, inputs: list[torch.Tensor]) -> int:
    """How many distinct tensors hold storage ``storage`` among ``inputs`` (which do)
    and the bases that they view: a view keeps its base alive (``_base``), so a written
    view of a buffer makes two holders. A base that is a parameter is not counted (it
    may be an input that the caller must compare; nor is any other tensor type), nor
    one no longer over ``storage`` (``base.data = ...`` after the view was taken)."""
    known = {id(tensor): tensor for tensor in inputs}
    for tensor in inputs:
        base = tensor._base
        if (
            base is not None
            and id(base) not in known
            and type(base) in _PLAIN_TENSORS
            and base.untyped_storage().data_ptr() == storage
        ):
            known[id(base)] = base
    return len(known)


#: ``torch._C._storage_Use_Count``: the reference count of a storage (None if this torch
#: lacks it: then every call with a written input compares the parameters too).
_STORAGE_USE_COUNT: Callable[[int], int] | None = getattr(torch._C, "_storage_Use_Count", None)


@functools.cache
def _references_besides_tensors() -> int:
    """References to a storage that its tensors do not hold (its Python object's), as
    counted on a fresh tensor's storage while its Python object is alive."""
    assert _STORAGE_USE_COUNT is not None
    tensor = torch.empty(1)
    storage = tensor.untyped_storage()
    return _STORAGE_USE_COUNT(storage._cdata) - 1  # one reference: the tensor's


def _storage_holders(storage: torch.UntypedStorage) -> int | None:
    """How many tensors hold ``storage`` (whose Python object the caller holds), or
    None when this torch cannot count them."""
    if _STORAGE_USE_COUNT is None:
        return None
    return _STORAGE_USE_COUNT(storage._cdata) - _references_besides_tensors()


def _overlaps(tensor: torch.Tensor, others: list[torch.Tensor]) -> bool:
    """Whether the memory spans of ``tensor``'s elements and of one of ``others`` (in the
    same storage) overlap, in bytes (views of one storage may differ in dtype)."""
    span = tensor_byte_span(tensor)
    return any(spans_overlap(span, tensor_byte_span(other)) for other in others)


#: Tensor types whose storages :func:`aliased_write` looks up (not ``nn.Parameter``).
_PLAIN_TENSORS = frozenset(t for t in TENSOR_TYPES if t is not torch.nn.Parameter)


def _plain_positions(inputs: Sequence[Any], mutated: tuple[int, ...]) -> Callable[..., Any]:
    """``inputs -> the inputs at the positions that held plain tensors (not parameters)
    and are not written, on this first call`` (one C call per use)."""
    positions = [
        position
        for position, value in enumerate(inputs)
        if type(value) in _PLAIN_TENSORS and position not in mutated
    ]
    return _picker(positions)


def _parameters(inputs: Sequence[Any], mutated: tuple[int, ...]) -> list[Any]:
    """The ``nn.Parameter`` inputs that are not written."""
    return [
        value
        for position, value in enumerate(inputs)
        if isinstance(value, torch.nn.Parameter) and position not in mutated
    ]


def _picker(positions: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """``values -> tuple(values[p] for p in positions)``, in one C call when it can."""
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    return lambda values: tuple(values[position] for position in positions)


class ComparedInputs:
    """``inputs -> the inputs that :func:`alias_safe` compares with the written ones``.

    Positions keep their roles from call to call (the guards check each input's type),
    so the positions of the plain tensors are taken from the first call: those are
    compared on every call. Parameters are compared only on a call where one may share
    a written input's memory (a model's hundred weights would cost more than its
    guards; :func:`aliased_write` takes them from :meth:`parameters`), but the guards
    accept a plain tensor where a parameter was: one that aliases a written input must
    not go unseen. So each call also compares the types at the parameters' positions
    with the first call's, one C-level tuple comparison (about 1 us for 100 parameters
    here); when one differs, that call compares every input that is not a parameter.

    :param inputs: the first call's inputs.
    :param mutated: the positions of the inputs the graph writes.
    """

    def __init__(self, inputs: Sequence[Any], mutated: tuple[int, ...]) -> None:
        self._mutated = mutated
        self._plain = _plain_positions(inputs, mutated)
        parameters = [
            position
            for position, value in enumerate(inputs)
            if type(value) is torch.nn.Parameter and position not in mutated
        ]
        self._parameters = _picker(parameters)
        self._parameter_types = (torch.nn.Parameter,) * len(parameters)

    def parameters(self, inputs: Sequence[Any]) -> Sequence[Any]:
        """The inputs at the positions that held parameters not written on the first
        call."""
        return self._parameters(inputs)

    def __call__(self, inputs: Sequence[Any]) -> Sequence[Any]:
        if tuple(map(type, self._parameters(inputs))) == self._parameter_types:
            return self._plain(inputs)
        return _plain_positions(inputs, self._mutated)(inputs)  # a position changed roles


#: Keys the fallback warnings once per wrapped graph (an ``id()`` would be reused by a
#: later graph once the first is freed, and that graph would not warn).
_GRAPH_SERIALS = itertools.count()


def alias_safe(runner: GraphRunner, eager: GraphRunner | None, aot: AotResult) -> GraphRunner:
    """``runner``, except that a call where an input the graph writes shares memory with
    another input (:func:`aliased_write`) runs ``eager`` (the torch-level graph with real
    ops) with a :class:`TorchstrataFallbackWarning`. After a graph break, a tensor and a
    view of it reach the next graph as two inputs; if that graph updates one, eager
    semantics need the other to see it.

    The inputs compared on every call are those that are not parameters
    (:class:`ComparedInputs`; a position that held a parameter on the first call and now
    holds a plain tensor is compared too); the parameters are compared on a call where
    one may share a written input's memory (``nn.Parameter(x)`` or ``weight.data = x``
    with ``x`` passed and written: see :func:`aliased_write`)."""
    mutated = tuple(aot.mutated_inputs)
    if not mutated or eager is None:
        return runner
    compared: list[ComparedInputs] = []

    def aliased(inputs: Sequence[Any]) -> bool:
        if not compared:
            compared.append(ComparedInputs(inputs, mutated))
        return aliased_write(inputs, mutated, compared[0](inputs), compared[0].parameters)

    message = (
        "torchstrata: a graph writes an input that shares memory with another input of the "
        "same call; running this call eagerly (the compiled graph treats its inputs as "
        "separate tensors)"
    )
    return _eager_when(aliased, runner, eager, ("aliased-write", next(_GRAPH_SERIALS)), message)


def offset_safe(runner: GraphRunner, eager: GraphRunner | None, aot: AotResult) -> GraphRunner:
    """``runner``, except that a call where an input listed in ``aot.offset_inputs`` (an
    ``as_strided`` reads it: its gradient was traced for an input at the start of its
    storage) starts elsewhere in its storage runs ``eager`` with a
    :class:`TorchstrataFallbackWarning`. One ``storage_offset()`` per listed input and
    call; graphs without such inputs are returned as they are."""
    positions = tuple(getattr(aot, "offset_inputs", ()) or ())
    if not positions or eager is None:
        return runner

    def inside(inputs: Sequence[Any]) -> bool:
        return any(inputs[p].storage_offset() for p in positions)

    message = (
        "torchstrata: an as_strided reads an input that starts inside its storage (a "
        "storage offset other than 0); its gradient was traced for an input at offset 0, "
        "so this call runs eagerly"
    )
    return _eager_when(inside, runner, eager, ("storage-offset", next(_GRAPH_SERIALS)), message)


def _eager_when(
    test: Callable[[Sequence[Any]], bool],
    runner: GraphRunner,
    eager: GraphRunner,
    key: Any,
    message: str,
) -> GraphRunner:
    """``runner``, except that a call whose inputs pass ``test`` runs ``eager``, with
    ``message`` as a :class:`TorchstrataFallbackWarning` (once per ``key``)."""

    def run(*inputs: Any) -> tuple[Any, ...]:
        if test(inputs):
            warn_once(key, message, stacklevel=4)
            return tuple(eager(*inputs))
        return runner(*inputs)

    return run
