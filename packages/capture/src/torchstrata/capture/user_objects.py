"""Instances of user classes made inside the trace, and classes defined there.

``Out(h=x * 2)`` for a plain Python class (a dataclass, a small helper object, a user
context manager) becomes a :class:`UserObjectVar`: its class is real, its attributes are
variables (tensors included), its ``__init__`` and methods are inlined with it as
``self``, and properties run their getter inlined. ``with obj:`` calls its ``__enter__``
and ``__exit__`` inlined. Nothing of it exists at run time unless it escapes (returned,
live at a graph break, stored into outside state): then the rebuild makes the object
with ``cls.__new__(cls)`` and sets its attributes.

``class Local: ...`` inside a traced function (``LOAD_BUILD_CLASS``) runs the class body
for real at capture time, its free variables given their constant values: the class
(made once per capture, where eager makes one per call) is then used like any other.
"""

from __future__ import annotations

import abc
import builtins
import collections
import dataclasses
import inspect
import sys
import types
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import torch

from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import (
    BoundMethodVar,
    ConstVar,
    DictVar,
    FunctionVar,
    NotConstant,
    ObjectVar,
    Var,
    python_value,
)

if TYPE_CHECKING:  # the frame type is only needed for annotations
    from torchstrata.capture.calls import CallingFrame

_MISSING = object()


@attrs.define(eq=False)
class UserObjectVar(Var):
    """An instance of user class ``cls`` made during the trace; ``attributes`` hold what
    was assigned to it (its ``__dict__``)."""

    cls: type
    attributes: dict[str, Var] = attrs.field(factory=dict)
    source: str | None = None
    #: The items of an object of a ``dict``/``OrderedDict`` subclass (:mod:`.mapping_objects`).
    mapping: DictVar | None = None


#: The dict types a user class may derive from (its objects have a ``mapping``).
DICT_BASES: tuple[type[dict[Any, Any]], ...] = (collections.OrderedDict, dict)


def mapping_base(cls: type) -> type[dict[Any, Any]] | None:
    """The dict type ``cls`` derives from (``OrderedDict`` before ``dict``), or None."""
    return next((base for base in DICT_BASES if issubclass(cls, base)), None)


def is_user_class(value: Any) -> bool:
    """A class of user code whose instances capture can make symbolically: plain
    metaclass, ``object.__new__``, no custom ``__setattr__``/``__getattribute__``, not
    from the standard library (``contextlib``'s managers run generators)."""
    if not isinstance(value, type) or type(value) not in (type, abc.ABCMeta):
        return False
    if value.__module__.split(".")[0] in sys.stdlib_module_names or issubclass(
        value, torch.nn.Module | torch.Tensor | BaseException
    ):
        return False
    base = mapping_base(value)
    return (
        value.__new__ is (object.__new__ if base is None else base.__new__)
        and (
            value.__setattr__ is object.__setattr__
            or _is_frozen(value)
            or isinstance(inspect.getattr_static(value, "__setattr__"), types.FunctionType)
        )
        and value.__getattribute__ in (object.__getattribute__, dict.__getattribute__)
    )


def _is_frozen(cls: type) -> bool:
    """A frozen dataclass: its ``__setattr__`` only refuses (``__init__`` stores with
    ``object.__setattr__``)."""
    params = getattr(cls, "__dataclass_params__", None)
    return dataclasses.is_dataclass(cls) and bool(getattr(params, "frozen", False))


def construct(
    frame: CallingFrame, cls: type, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var:
    """``cls(*args, **kwargs)``: a new object, ``__init__`` inlined."""
    from torchstrata.capture.calls import call_function  # calls imports this module

    base = mapping_base(cls)
    instance = UserObjectVar(cls, mapping=None if base is None else DictVar({}, dict_type=base))
    init = inspect.getattr_static(cls, "__init__")
    if base is not None and init is base.__init__:  # the dict's own: items from the arguments
        call_function(frame, ObjectVar(init), [instance, *args], kwargs)
    elif init is not object.__init__:
        if not isinstance(init, types.FunctionType):
            raise Unsupported(f"{cls.__name__}.__init__ is not a Python function")
        result = call_function(frame, BoundMethodVar(ObjectVar(init), instance), args, kwargs)
        if not (isinstance(result, ConstVar) and result.value is None):
            raise Unsupported(f"{cls.__name__}.__init__ returned a value")
    elif args or kwargs:
        raise Unsupported(f"{cls.__name__}() takes no arguments")
    return instance


def object_attribute(tracer: Tracer, var: UserObjectVar, name: str) -> Var:
    """``var.name``: an assigned attribute, a method bound to ``var``, a property's
    getter inlined by the caller (returned as a bound method to call), or a class
    attribute."""
    from torchstrata.capture.attributes import AttributeMissing

    static = inspect.getattr_static(var.cls, name, _MISSING)
    is_data_descriptor = static is not _MISSING and hasattr(type(static), "__set__")
    if name in var.attributes and not is_data_descriptor:
        return var.attributes[name]
    if name == "__class__":
        return ObjectVar(var.cls)
    if name == "__dict__":
        raise Unsupported(f"__dict__ of {var.cls.__name__} objects made in the trace")
    if static is _MISSING:
        if inspect.getattr_static(var.cls, "__getattr__", _MISSING) is not _MISSING:
            raise Unsupported(f"{var.cls.__name__} defines __getattr__")
        raise AttributeMissing(f"{var.cls.__name__} object has no attribute {name!r}")
    if isinstance(static, types.FunctionType):
        return BoundMethodVar(ObjectVar(static), var)
    if var.mapping is not None:
        from torchstrata.capture.mapping_objects import is_dict_method  # it imports this

        if is_dict_method(static):  # self.keys(): the call works on the mapping
            return BoundMethodVar(ObjectVar(static), var)
    if isinstance(static, staticmethod):
        return ObjectVar(static.__func__)
    if isinstance(static, classmethod):
        return BoundMethodVar(ObjectVar(static.__func__), ObjectVar(var.cls))
    if isinstance(static, property):
        if static.fget is None:
            raise AttributeMissing(f"property {name!r} of {var.cls.__name__} has no getter")
        return PropertyGet(BoundMethodVar(ObjectVar(static.fget), var))
    getter = inspect.getattr_static(type(static), "__get__", None)
    if isinstance(getter, types.FunctionType):  # a descriptor class of user code
        descriptor = BoundMethodVar(ObjectVar(getter), ObjectVar(static))
        return PropertyGet(descriptor, [var, ObjectVar(var.cls)])
    if getter is not None:
        raise Unsupported(f"descriptor {type(static).__name__} {name!r} of {var.cls.__name__}")
    return tracer.wrap(getattr(var.cls, name), None, guard=False)


@attrs.define(eq=False)
class PropertyGet(Var):
    """A property's getter bound to its object (or a descriptor's ``__get__``, with its
    arguments): the caller calls it, inlined, for the attribute's value."""

    getter: BoundMethodVar
    args: list[Var] = attrs.field(factory=list)


def store_attribute(var: UserObjectVar, name: str, value: Var) -> None:
    """``var.name = value`` (plain attributes; a property setter is inlined elsewhere)."""
    static = inspect.getattr_static(var.cls, name, _MISSING)
    if static is not _MISSING and hasattr(type(static), "__set__"):
        raise Unsupported(f"assigning {name!r} of {var.cls.__name__} runs a descriptor")
    if _is_frozen(var.cls):
        raise Unsupported(f"assigning {name!r} of frozen dataclass {var.cls.__name__}")
    var.attributes[name] = value


def build_class(frame: CallingFrame, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    """``__build_class__(body, name, *bases)``: the class made now, for real."""
    if kwargs or len(args) < 2 or not isinstance(args[0], FunctionVar):
        raise Unsupported("a class statement with a metaclass or keywords is not supported")
    body = args[0]
    try:
        name = python_value(args[1])
        bases = [python_value(base) for base in args[2:]]
        cells = tuple(_real_cell(cell) for cell in body.closure)
    except NotConstant:
        raise Unsupported("a class statement over values known only at run time") from None
    function = types.FunctionType(body.code, body.globals, body.code.co_name, None, cells)
    try:
        cls = builtins.__build_class__(function, name, *bases)
    except Exception as error:  # noqa: BLE001 - the user's exception: let eager raise it
        raise Unsupported(f"class {name} raised {type(error).__name__}: {error}") from None
    return ObjectVar(cls)


def _real_cell(cell: Any) -> types.CellType:
    if cell.var is None and cell.pending is not None:
        return types.CellType(cell.pending[0])
    if cell.var is None:
        return types.CellType()
    return types.CellType(python_value(cell.var))
