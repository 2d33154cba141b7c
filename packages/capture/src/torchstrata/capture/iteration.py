"""Iteration at capture time: every loop is unrolled over items known in full."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, cast

import torch

from torchstrata.capture.indexing import subscript
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.user_objects import UserObjectVar
from torchstrata.capture.variables import (
    ConstVar,
    DictVar,
    IteratorVar,
    ObjectVar,
    SequenceVar,
    TensorVar,
    Var,
    describe,
)
from torchstrata.core import GuardKind

#: Longest sequence capture unrolls a loop over.
MAX_UNROLL = 10_000

#: ``dict.keys()``, ``.values()``, ``.items()`` of a constant dict (a Counter made in the trace).
_DICT_VIEWS: tuple[type[Collection[Any]], ...] = (
    type({}.keys()),
    type({}.values()),
    type({}.items()),
)
_MODULE_SEQUENCES = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ParameterList)
_MODULE_MAPPINGS = (torch.nn.ModuleDict, torch.nn.ParameterDict)


def _iterates_its_modules(value: object) -> bool:
    """A Sequential or ModuleList whose iteration is the stock one (its ``_modules`` values)."""
    for base in (torch.nn.Sequential, torch.nn.ModuleList):
        if isinstance(value, base):
            return type(value).__iter__ is base.__iter__ and None not in value._modules.values()
    return False


def iterate(tracer: Tracer, var: Var) -> list[Var]:
    """The items ``for item in var`` would produce (iterators are consumed)."""
    if isinstance(var, IteratorVar):
        items = var.items[var.position :]
        var.position = len(var.items)
        return items
    if isinstance(var, SequenceVar):
        return list(var.items)
    if isinstance(var, DictVar):
        return [ConstVar(key) for key in var.items]
    if isinstance(var, UserObjectVar) and var.mapping is not None:  # a dict subclass's keys
        return [ConstVar(key) for key in var.mapping.items]
    if isinstance(var, ConstVar) and isinstance(
        var.value, (tuple, range, str, bytes, set, frozenset, dict, *_DICT_VIEWS)
    ):
        values = cast("Collection[Any]", var.value)
        if len(values) > MAX_UNROLL:
            raise Unsupported(f"a loop over {len(values)} items is too long to unroll")
        return [ConstVar(item) for item in values]
    if isinstance(var, TensorVar):
        if var.meta.ndim == 0:
            raise Unsupported("iteration over a 0-d tensor")
        if var.meta.shape[0] > MAX_UNROLL:
            raise Unsupported("a loop over a tensor's rows is too long to unroll")
        return [subscript(tracer, var, ConstVar(index)) for index in range(var.meta.shape[0])]
    if isinstance(var, ObjectVar) and _iterates_its_modules(var.value) and var.source:
        # Items by key (a dict lookup per call, not Sequential.__getitem__'s walk), under a
        # guard on the keys in order: adding, removing or reordering modules recompiles.
        keys = tuple(var.value._modules)
        tracer.guard(GuardKind.CONSTANT_MATCH, f"tuple({var.source}._modules)", keys)
        return [
            tracer.wrap(var.value._modules[key], f"{var.source}._modules[{key!r}]") for key in keys
        ]
    if isinstance(var, ObjectVar) and isinstance(var.value, _MODULE_SEQUENCES):
        if var.source:  # the loop ran over this many items: appending one must recompile
            tracer.guard(GuardKind.CONSTANT_MATCH, f"len({var.source})", len(var.value))
        return [
            tracer.wrap(item, f"{var.source}[{index}]" if var.source else None)
            for index, item in enumerate(var.value)
        ]
    if isinstance(var, ObjectVar) and isinstance(var.value, _MODULE_MAPPINGS):
        if var.source:
            keys = tuple(var.value.keys())
            tracer.guard(GuardKind.CONSTANT_MATCH, f"tuple({var.source}.keys())", keys)
        return [ConstVar(key) for key in var.value]
    if isinstance(var, ObjectVar) and var.source and _stock_sequence(var.value):
        # a list or tuple subclass (Hugging Face's LogitsProcessorList) iterated as its
        # base iterates: its items by index, under a guard on the length
        tracer.guard(GuardKind.CONSTANT_MATCH, f"len({var.source})", len(var.value))
        return [tracer.wrap(item, f"{var.source}[{index}]") for index, item in enumerate(var.value)]
    raise Unsupported(f"iteration over {describe(var)} is not supported")


def _stock_sequence(value: object) -> bool:
    """A list or tuple subclass instance whose iteration and indexing are its base's."""
    for base in (list, tuple):
        if isinstance(value, base) and type(value) is not base:
            cls = type(value)
            return cls.__iter__ is base.__iter__ and cls.__getitem__ is base.__getitem__
    return False
