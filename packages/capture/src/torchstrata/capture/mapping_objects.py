"""Objects of user ``dict``/``OrderedDict`` subclasses made in the trace: Hugging Face's
``ModelOutput`` style (a dataclass over ``OrderedDict`` whose ``__post_init__`` puts the
fields that are not None into the dict, with ``__getitem__`` by key or position and a
``__setattr__``/``__setitem__`` keeping attributes and items in step).

Such an object is a :class:`~.user_objects.UserObjectVar` with a ``mapping`` (a
:class:`~.variables.DictVar` of its items) beside its attributes. The class's Python
methods (``__setattr__``, ``__getitem__``, ``__setitem__``, ``to_tuple``) are inlined as
for any user class; what they reach of the dict base (``super().__setitem__(k, v)``,
``self.keys()``, ``dict.__getitem__(self, k)``) lands here and works on the mapping.
Escaping the trace, the object is rebuilt with its class's ``__new__``, the base's
``__setitem__`` for the items and ``object.__setattr__`` for the attributes.
"""

from __future__ import annotations

import collections
import inspect
import types
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchstrata.capture.tracer import Unsupported
from torchstrata.capture.user_objects import DICT_BASES, UserObjectVar
from torchstrata.capture.variables import (
    BoundMethodVar,
    ConstVar,
    DictVar,
    IteratorVar,
    MethodVar,
    ObjectVar,
    SequenceVar,
    Var,
    python_value,
)

if TYPE_CHECKING:  # the frame type is only needed for annotations
    from torchstrata.capture.calls import CallingFrame


def is_dict_method(value: Any) -> bool:
    """Whether ``value`` is a method of ``dict``/``OrderedDict`` implemented in C
    (``dict.__setitem__``, ``OrderedDict.keys``): it works on a mapping object's items."""
    name = getattr(value, "__name__", None)
    return isinstance(name, str) and any(base.__dict__.get(name) is value for base in DICT_BASES)


def call_dict_method(
    frame: CallingFrame, method: Any, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var | None:
    """``method(obj, *args)`` for a dict method and an object with a mapping; None when
    this is not such a call."""
    if not args or not isinstance(args[0], UserObjectVar) or args[0].mapping is None:
        return None
    if not is_dict_method(method):
        return None
    from torchstrata.capture.calls import call_function  # calls imports this module

    obj, mapping, rest, name = args[0], args[0].mapping, list(args[1:]), method.__name__
    setitem = inspect.getattr_static(obj.cls, "__setitem__")
    if mapping.dict_type is collections.OrderedDict and isinstance(setitem, types.FunctionType):
        # OrderedDict's __init__, update, setdefault and copy store through the class's
        # own __setitem__ (dict's do not)
        if name == "copy":
            raise Unsupported(f"{obj.cls.__name__}.copy() (it calls the class) is not supported")
        if name in ("__init__", "update"):
            entries = call_function(frame, ObjectVar(dict), rest, kwargs)
            assert isinstance(entries, DictVar)
            for key, value in entries.items.items():
                call_function(
                    frame, BoundMethodVar(ObjectVar(setitem), obj), [ConstVar(key), value], {}
                )
            return ConstVar(None)
        if name == "setdefault" and python_value(rest[0]) not in mapping.items:
            default = rest[1] if len(rest) > 1 else ConstVar(None)
            call_function(frame, BoundMethodVar(ObjectVar(setitem), obj), [rest[0], default], {})
            return default
    if name == "__init__":
        call_function(frame, MethodVar(mapping, "update"), rest, kwargs)
        return ConstVar(None)
    if name == "__setitem__":
        key, value = rest
        mapping.items[python_value(key)] = value
        return ConstVar(None)
    if name == "__getitem__":
        key = python_value(rest[0])
        if key not in mapping.items:
            failed = Unsupported(f"KeyError: {key!r}")
            failed.python_exception = KeyError
            raise failed
        return mapping.items[key]
    if name == "__delitem__":
        mapping.items.pop(python_value(rest[0]), None)
        return ConstVar(None)
    if name == "__contains__":
        return ConstVar(python_value(rest[0]) in mapping.items)
    if name == "__len__":
        return ConstVar(len(mapping.items))
    if name == "__iter__":
        return IteratorVar([ConstVar(key) for key in mapping.items])
    return call_function(frame, MethodVar(mapping, name), rest, kwargs)


def subscript_items(var: UserObjectVar, index: Var) -> Var:
    """``var[index]`` of a mapping object whose class keeps the dict's ``__getitem__``."""
    assert var.mapping is not None
    key = python_value(index)
    if key not in var.mapping.items:
        failed = Unsupported(f"KeyError: {key!r}")
        failed.python_exception = KeyError
        raise failed
    return var.mapping.items[key]


def keys_of(var: UserObjectVar) -> list[Var]:
    """What iterating a mapping object gives: its keys."""
    assert var.mapping is not None
    return [ConstVar(key) for key in var.mapping.items]


def pairs(var: UserObjectVar) -> SequenceVar:
    """``var.items()`` as a tuple of pairs (for ``dict(obj)``)."""
    assert var.mapping is not None
    return SequenceVar([SequenceVar([ConstVar(k), v]) for k, v in var.mapping.items.items()])
