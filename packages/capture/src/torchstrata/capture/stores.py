"""Attribute assignment (``STORE_ATTR``) on symbolic values.

An object that exists outside the trace (a module, an argument, a global, a class)
is not changed at capture time: the store is logged in the tracer's side effects
(:mod:`.side_effects`), later reads of the attribute in the trace see the stored
variable, and the assignment runs for real after the graph. An object built during the
trace from constants (a dataclass config) is changed in place: each call copies it.
"""

from __future__ import annotations

import inspect
import types
from typing import Any

import torch

from torchstrata.capture.side_effects import DELETED
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.user_objects import UserObjectVar
from torchstrata.capture.user_objects import store_attribute as user_store
from torchstrata.capture.variables import (
    ObjectVar,
    TensorVar,
    Var,
    describe,
    is_constant,
    python_value,
)

#: ``__setattr__`` implementations that only store (``nn.Module``'s also registers
#: parameters, buffers and submodules, which the real assignment after the graph does).
_PLAIN_SETATTR = (
    object.__setattr__,
    torch.nn.Module.__setattr__,
    type.__setattr__,
    types.ModuleType.__setattr__,
)

_MISSING = object()


def store_attribute(tracer: Tracer, owner: Var, name: str, value: Var) -> None:
    """``owner.name = value``."""
    if isinstance(owner, UserObjectVar):
        user_store(owner, name, value)
        return
    if isinstance(owner, TensorVar) and owner.source is None and not hasattr(torch.Tensor, name):
        owner.python_attributes[name] = value  # a tensor the graph makes: a tag on it
        return
    if isinstance(owner, TensorVar) and name == "data":
        view = tracer.data_views.get(id(owner))
        if view is not None and view[0] is owner and view[1] is value:
            return  # ``param.data += d``: written in place through the view already
    if not isinstance(owner, ObjectVar):
        raise Unsupported(f"assigning attribute {name!r} of {describe(owner)} is not supported")
    obj = owner.value
    if owner.source is None:
        if owner.fresh and is_constant(value):
            _set_now(obj, name, python_value(value))
            return
        raise Unsupported(
            f"assigning attribute {name!r} of {describe(owner)}, an object capture cannot "
            "fetch at call time, is not supported"
        )
    _check_plain(obj, name)
    tracer.side_effects.store_attribute(owner, name, value)


def delete_attribute(tracer: Tracer, owner: Var, name: str) -> None:
    """``del owner.name``."""
    if isinstance(owner, UserObjectVar):
        if owner.attributes.pop(name, None) is None:
            raise Unsupported(f"del of {name!r}, which {owner.cls.__name__} object lacks")
        return
    if not isinstance(owner, ObjectVar) or owner.source is None:
        raise Unsupported(f"deleting attribute {name!r} of {describe(owner)} is not supported")
    _check_plain(owner.value, name)
    if type(owner.value).__delattr__ not in (object.__delattr__, torch.nn.Module.__delattr__):
        raise Unsupported(f"{type(owner.value).__name__} defines __delattr__")
    tracer.side_effects.store_attribute(owner, name, DELETED)


def _check_plain(obj: Any, name: str) -> None:
    """Raise unless ``obj.name = value`` only stores the value (no user ``__setattr__``,
    no property setter or other data descriptor of the class)."""
    cls = type(obj)
    if cls.__setattr__ not in _PLAIN_SETATTR:
        raise Unsupported(
            f"{cls.__name__} defines __setattr__: assigning {name!r} is not supported"
        )
    static = inspect.getattr_static(cls, name, _MISSING)  # a class's: its metaclass's
    descriptor = static is not _MISSING and hasattr(type(static), "__set__")
    if descriptor and type(static).__name__ != "member_descriptor":  # __slots__: plain
        raise Unsupported(
            f"assigning {name!r} of {cls.__name__} runs a descriptor "
            f"({type(static).__name__}): not supported"
        )


def _set_now(obj: Any, name: str, value: Any) -> None:
    try:
        setattr(obj, name, value)
    except Exception as error:  # noqa: BLE001 - the user's exception: let eager raise it
        raise Unsupported(f"assigning {name!r} raised {type(error).__name__}") from None
