"""Calls that the compiled graphs cannot take as they come: those run the torch-level
graph eagerly instead, with a :class:`TorchstrataFallbackWarning` (once per graph).

- :func:`alias_safe`: a graph writes an input that shares memory with another input
  of the same call (after a graph break, a tensor and a view of it reach the next
  graph as two inputs); the traced graph reads them as separate values.
- :func:`offset_safe`: an ``as_strided`` reads an input that starts inside its storage;
  its gradient was traced for an input at offset 0.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchstrata.core import TENSOR_TYPES, AotResult, spans_overlap, tensor_byte_span
from torchstrata.runtime.fallback import warn_once
from torchstrata.runtime.runners import GraphRunner


def aliased_write(
    inputs: Sequence[Any], mutated: tuple[int, ...], others: Sequence[Any] | None = None
) -> bool:
    """Whether an input the graph writes (``mutated``) shares memory with another input.

    The traced graph reads each input as a separate value, so a read of the other input
    after the write, or a second write, would miss the update: such a call must run the
    graph eagerly. Inputs share memory when they share a storage and the spans of
    memory their elements lie in overlap (a key and a value cache cut from one buffer do
    not). ``others``: the inputs to compare with the written ones, not themselves
    written (default: every tensor input that is not written and not an
    ``nn.Parameter``: a model's hundred weights would cost more than its guards, and a
    parameter that views a buffer the graph writes is not something models do). Costs
    one storage lookup (0.2 us here) per written input and per other input.
    """
    written: dict[int, list[torch.Tensor]] = {}  # storage -> written inputs in it
    for index in mutated:
        tensor = inputs[index]
        if not tensor.numel():
            continue  # no elements to share
        storage = tensor.untyped_storage().data_ptr()
        if storage in written and _overlaps(tensor, written[storage]):
            return True  # two written inputs overlap
        written.setdefault(storage, []).append(tensor)
    if others is None:
        others = _plain_positions(inputs, mutated)(inputs)
    for value in others:
        sharing = written.get(value.untyped_storage().data_ptr())
        if sharing is not None and value.numel() and _overlaps(value, sharing):
            return True
    return False


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


def _picker(positions: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """``values -> tuple(values[p] for p in positions)``, in one C call when it can."""
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    return lambda values: tuple(values[position] for position in positions)


class ComparedInputs:
    """``inputs -> the inputs that :func:`alias_safe` compares with the written ones``.

    Positions keep their roles from call to call (the guards check each input's type),
    so the positions of the plain tensors are taken from the first call: those are
    compared on every call. Parameters are not (a model's hundred weights would cost
    more than its guards, and a parameter that views a buffer the graph writes is not
    something models do), but the guards accept a plain tensor where a parameter was:
    one that aliases a written input must not go unseen. So each call also compares the
    types at the parameters' positions with the first call's, one C-level tuple
    comparison (about 1 us for 100 parameters here); when one differs, that call
    compares every input that is not a parameter.

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

    def __call__(self, inputs: Sequence[Any]) -> Sequence[Any]:
        if tuple(map(type, self._parameters(inputs))) == self._parameter_types:
            return self._plain(inputs)
        return _plain_positions(inputs, self._mutated)(inputs)  # a position changed roles


def alias_safe(runner: GraphRunner, eager: GraphRunner | None, aot: AotResult) -> GraphRunner:
    """``runner``, except that a call where an input the graph writes shares memory with
    another input (:func:`aliased_write`) runs ``eager`` (the torch-level graph with real
    ops) with a :class:`TorchstrataFallbackWarning`. After a graph break, a tensor and a
    view of it reach the next graph as two inputs; if that graph updates one, eager
    semantics need the other to see it.

    The inputs compared are those that are not parameters (:class:`ComparedInputs`): a
    position that held a parameter on the first call and now holds a plain tensor is
    compared too. A parameter that aliases a written input goes unseen."""
    mutated = tuple(aot.mutated_inputs)
    if not mutated or eager is None:
        return runner
    compared: list[ComparedInputs] = []

    def aliased(inputs: Sequence[Any]) -> bool:
        if not compared:
            compared.append(ComparedInputs(inputs, mutated))
        return aliased_write(inputs, mutated, compared[0](inputs))

    message = (
        "torchstrata: a graph writes an input that shares memory with another input of the "
        "same call; running this call eagerly (the compiled graph treats its inputs as "
        "separate tensors)"
    )
    return _eager_when(aliased, runner, eager, ("aliased-write", id(runner)), message)


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
    return _eager_when(inside, runner, eager, ("storage-offset", id(runner)), message)


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
