"""Dataclass instances made during capture whose fields hold traced values.

``Stats(x.mean(0), x.std(0))`` builds no graph node: the instance is an
:class:`InstanceVar` holding its fields' variables, so ``stats.mean`` used later in the
graph is the traced tensor, and the instance the function returns (or leaves live at a
graph break) is rebuilt after the graph as the same class, its fields set as the
dataclass's generated ``__init__`` sets them. Only classes whose construction is exactly
that are recorded: a dataclass with its generated ``__init__``, no ``__post_init__``, no
``__new__`` or ``__setattr__`` of its own (a frozen one's is the generated one), and no
field left to a ``default_factory`` or excluded from ``__init__``.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from torchstrata.capture.tracer import Unsupported
from torchstrata.capture.variables import BoundMethodVar, ConstVar, ObjectVar, Var


@attrs.define(eq=False)
class InstanceVar(Var):
    """An instance of dataclass ``cls`` made during capture, with its fields' variables."""

    cls: type
    fields: dict[str, Var]


def _own_setattr(cls: type) -> bool:
    """Whether ``cls`` sets attributes its own way (a frozen dataclass's generated
    ``__setattr__``, which only refuses, does not count: its ``__init__`` bypasses it)."""
    setattr_ = cls.__setattr__
    if setattr_ is object.__setattr__:
        return False
    code = getattr(setattr_, "__code__", None)
    frozen = cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    return not (frozen and code is not None and code.co_filename == "<string>")


def recordable(cls: type) -> str | None:
    """None when instances of ``cls`` can be recorded, else why not."""
    if not dataclasses.is_dataclass(cls):
        return f"{cls.__name__} is not a dataclass"
    init = inspect.getattr_static(cls, "__init__", None)
    code = getattr(init, "__code__", None)
    if code is None or code.co_filename != "<string>":
        return f"{cls.__name__} has an __init__ of its own"
    if hasattr(cls, "__post_init__"):
        return f"{cls.__name__} has a __post_init__"
    if cls.__new__ is not object.__new__:
        return f"{cls.__name__} has a __new__ of its own"
    if _own_setattr(cls):
        return f"{cls.__name__} has a __setattr__ of its own"
    return None


def make_instance(cls: type, args: Sequence[Var], kwargs: Mapping[str, Var]) -> InstanceVar:
    """``cls(*args, **kwargs)`` as an :class:`InstanceVar` (raises :class:`Unsupported`
    where it cannot be recorded, or the arguments do not fit the fields)."""
    reason = recordable(cls)
    if reason is not None:
        raise Unsupported(f"{cls.__name__}(...) with non-constant fields: {reason}")
    fields = dataclasses.fields(cls)
    if any(not field.init for field in fields):
        raise Unsupported(f"{cls.__name__}(...) has a field set outside __init__")
    positional = [field for field in fields if not field.kw_only]
    if len(args) > len(positional):
        raise Unsupported(f"{cls.__name__}() takes {len(positional)} positional arguments")
    values: dict[str, Var] = dict(zip((field.name for field in positional), args))
    for key, value in kwargs.items():
        if key in values or key not in {field.name for field in fields}:
            raise Unsupported(f"{cls.__name__}() got an unexpected or repeated argument {key!r}")
        values[key] = value
    for field in fields:
        if field.name in values:
            continue
        if field.default is not dataclasses.MISSING:
            values[field.name] = _default(cls, field.name, field.default)
        else:  # a default_factory is called per instance; no default: eager's TypeError
            raise Unsupported(f"{cls.__name__}() without a value for field {field.name!r}")
    return InstanceVar(cls, {field.name: values[field.name] for field in fields})


def _default(cls: type, name: str, value: Any) -> Var:
    if isinstance(value, int | float | bool | str | type(None)):
        return ConstVar(value)
    raise Unsupported(f"{cls.__name__}.{name}'s default {type(value).__name__} is not supported")


def instance_attribute(var: InstanceVar, name: str) -> Var:
    """``instance.name``: a field's variable, or a method bound to the instance."""
    if name in var.fields:
        return var.fields[name]
    member = inspect.getattr_static(var.cls, name, None)
    if isinstance(member, types.FunctionType):
        return BoundMethodVar(ObjectVar(member), var)
    raise Unsupported(f"attribute {name!r} of a {var.cls.__name__} instance is not supported")


def build_instance(cls: type, values: Mapping[str, Any]) -> Any:
    """A real instance of ``cls`` with these field values, as its generated ``__init__``
    leaves it (``object.__setattr__``, as a frozen dataclass's ``__init__`` does)."""
    instance: Any = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(instance, name, value)
    return instance
