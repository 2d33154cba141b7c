"""Builtins that call back into user code: ``map``, ``filter``, ``sorted``/``min``/``max``
with ``key=``, ``operator.itemgetter``/``attrgetter`` objects, and named tuple classes.

They take ``call(fn, args)``, the capture-time call (``calls.call_function``), so the
functions they apply are inlined like any other call.
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torchstrata.capture.attributes import get_attribute
from torchstrata.capture.indexing import subscript
from torchstrata.capture.iteration import iterate
from torchstrata.capture.operators import truth
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import (
    ConstVar,
    IteratorVar,
    NotConstant,
    SequenceVar,
    Var,
    python_value,
)

Call = Callable[[Var, list[Var]], Var]


def is_namedtuple_class(value: Any) -> bool:
    """A class made by ``collections.namedtuple`` or ``typing.NamedTuple``."""
    return isinstance(value, type) and issubclass(value, tuple) and hasattr(value, "_fields")


def call_higher_order(
    tracer: Tracer, call: Call, fn: Any, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var | None:
    """The result of ``fn(*args, **kwargs)`` when ``fn`` is one of this module's, else None."""
    if is_namedtuple_class(fn):
        return _namedtuple(fn, args, kwargs)
    if isinstance(fn, operator.itemgetter | operator.attrgetter) and len(args) == 1:
        keys: tuple[Any, ...] = fn.__reduce__()[1]  # type: ignore[assignment]
        if isinstance(fn, operator.itemgetter):
            picked = [subscript(tracer, args[0], ConstVar(key)) for key in keys]
        else:
            picked = [_dotted(tracer, args[0], key) for key in keys]
        return picked[0] if len(picked) == 1 else SequenceVar(picked)
    if fn is builtins.map and len(args) >= 2 and not kwargs:
        columns = [iterate(tracer, arg) for arg in args[1:]]
        return IteratorVar([call(args[0], list(row)) for row in zip(*columns)])
    if fn is builtins.filter and len(args) == 2 and not kwargs:
        test = args[0]
        items = iterate(tracer, args[1])
        is_none = isinstance(test, ConstVar) and test.value is None
        return IteratorVar(
            [item for item in items if truth(item if is_none else call(test, [item]), "filter")]
        )
    if fn in (builtins.sorted, builtins.min, builtins.max) and "key" in kwargs and len(args) == 1:
        return _by_key(tracer, call, fn, args[0], kwargs)
    if fn is builtins.sorted and len(args) == 1 and set(kwargs) <= {"reverse"}:
        return _by_key(tracer, call, fn, args[0], kwargs)
    return None


def _dotted(tracer: Tracer, var: Var, path: str) -> Var:
    for name in path.split("."):
        var = get_attribute(tracer, var, name)
    return var


def _namedtuple(cls: type, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    fields: tuple[str, ...] = cls._fields  # type: ignore[attr-defined]
    values = dict(zip(fields, args))
    values.update(kwargs)
    defaults = getattr(cls, "_field_defaults", {})
    try:
        items = [values[f] if f in values else ConstVar(defaults[f]) for f in fields]
    except KeyError as error:
        raise Unsupported(f"{cls.__name__}() missing argument {error}") from None
    if len(values) != len(set(values) & set(fields)) or len(args) > len(fields):
        raise Unsupported(f"{cls.__name__}() got unexpected arguments")
    return SequenceVar(items, field_names=fields, tuple_type=cls)


def _by_key(tracer: Tracer, call: Call, fn: Any, iterable: Var, kwargs: Mapping[str, Var]) -> Var:
    items = iterate(tracer, iterable)
    key = kwargs.get("key")
    try:
        reverse = bool(python_value(kwargs["reverse"])) if "reverse" in kwargs else False
        if key is None or (isinstance(key, ConstVar) and key.value is None):
            keys = [python_value(item) for item in items]
        else:
            keys = [python_value(call(key, [item])) for item in items]
    except NotConstant:
        raise Unsupported(f"{fn.__name__}() over keys that are not constants") from None
    order = sorted(range(len(items)), key=keys.__getitem__, reverse=reverse)
    if fn is builtins.sorted:
        return SequenceVar([items[i] for i in order], is_list=True)
    if not items:
        raise Unsupported(f"{fn.__name__}() of an empty sequence")
    pick = min if fn is builtins.min else max
    return items[pick(range(len(items)), key=keys.__getitem__)]
