"""Python builtins (``len``, ``isinstance``, ``range``, ``zip``, ``super``...) at capture time."""

from __future__ import annotations

import builtins
import collections
import enum
import functools
import operator
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch

from torchstrata.capture.attributes import AttributeMissing, get_attribute
from torchstrata.capture.instances import InstanceVar
from torchstrata.capture.iteration import iterate
from torchstrata.capture.operators import apply_operator, fold
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.user_objects import PropertyGet, UserObjectVar
from torchstrata.capture.variables import (
    Cell,
    ConstVar,
    DictVar,
    FunctionVar,
    IteratorVar,
    NotConstant,
    ObjectVar,
    SequenceVar,
    SuperVar,
    TensorVar,
    Var,
    describe,
    python_value,
)


class FrameState(Protocol):
    """What builtins may read of the calling frame (``super()`` needs its cells)."""

    tracer: Tracer
    code: types.CodeType
    locals: dict[str, Var]
    cells: dict[str, Cell]

    def read_cell(self, name: str) -> Var:
        """The value of cell or free variable ``name``."""
        ...


Handler = Callable[[FrameState, Sequence[Var], Mapping[str, Var]], Var]

#: Builtins evaluated directly when every argument is a constant.
PURE_BUILTINS = frozenset({
    builtins.abs, builtins.bool, builtins.int, builtins.float, builtins.str, builtins.min,
    builtins.max, builtins.round, builtins.pow, builtins.divmod, builtins.any, builtins.all,
    builtins.sorted, builtins.callable, builtins.repr, builtins.hash, builtins.slice,
    builtins.range, builtins.issubclass, builtins.chr, builtins.ord, builtins.format,
    builtins.set, builtins.frozenset,
    # (torch.jit.is_tracing(), asked by pad_sequence and others: a captured function is
    # not traced by torch.jit, and capture runs no jit trace, so it folds to False)
    torch._C._is_tracing,
    # (the name of the private-use backend, a process-wide constant: parameters_to_vector
    # asks it when it checks devices)
    torch._C._get_privateuse1_backend_name,
})  # fmt: skip

#: Builtins that only iterate their argument: given a dict, they read its keys.
_KEY_CONSUMERS = frozenset({builtins.set, builtins.frozenset, builtins.sorted})

#: Calls that turn a tensor's data into a Python value.
_DATA_DEPENDENT = {builtins.int: "int", builtins.float: "float", builtins.bool: "bool"}


def python_type(var: Var) -> type:
    """``type(var)`` at capture time."""
    if isinstance(var, TensorVar):
        return var.python_type
    if isinstance(var, SequenceVar):
        if var.is_deque:
            return collections.deque
        return var.tuple_type or (list if var.is_list else tuple)
    if isinstance(var, DictVar):
        return var.dict_type
    if isinstance(var, InstanceVar):
        return var.cls
    if isinstance(var, ConstVar | ObjectVar):
        return type(var.value)
    if isinstance(var, FunctionVar):
        return types.FunctionType
    if isinstance(var, UserObjectVar):
        return var.cls
    raise Unsupported(f"type() of {describe(var)} is not supported")


def _len(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    (value,) = args
    if isinstance(value, UserObjectVar) and value.mapping is not None:
        value = value.mapping
    if isinstance(value, SequenceVar | DictVar):
        return ConstVar(len(value.items))
    if isinstance(value, TensorVar):
        if value.meta.ndim == 0:
            raise Unsupported("len() of a 0-d tensor")
        return ConstVar(value.meta.shape[0])
    return fold(len, python_value(value))


def _isinstance(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    value, classes = args
    return ConstVar(issubclass(python_type(value), python_value(classes)))


def _type(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    if len(args) != 1:
        raise Unsupported("type() with three arguments is not supported")
    return ObjectVar(python_type(args[0]))


def _iterator(items: list[Var]) -> IteratorVar:
    return IteratorVar(items)


def _enumerate(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    start = python_value(args[1] if len(args) > 1 else kwargs.get("start", ConstVar(0)))
    items = iterate(frame.tracer, args[0])
    return _iterator([SequenceVar([ConstVar(start + i), item]) for i, item in enumerate(items)])


def _zip(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    columns = [iterate(frame.tracer, arg) for arg in args]
    return _iterator([SequenceVar(list(row)) for row in zip(*columns)])


def _reversed(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    return _iterator(list(reversed(iterate(frame.tracer, args[0]))))


def _iter(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    return _iterator(iterate(frame.tracer, args[0]))


def _next(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    iterator = args[0]
    if not isinstance(iterator, IteratorVar):
        raise Unsupported(f"next() on {describe(iterator)} is not supported")
    if iterator.position >= len(iterator.items):
        if len(args) > 1:
            return args[1]
        raise Unsupported("next() raised StopIteration")
    iterator.position += 1
    return iterator.items[iterator.position - 1]


def _sequence_of(is_list: bool) -> Handler:
    def build(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
        items = iterate(frame.tracer, args[0]) if args else []
        return SequenceVar(list(items), is_list=is_list)

    return build


def _dict(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    items: dict[Any, Var] = {}
    if args:
        source = args[0]
        if isinstance(source, UserObjectVar) and source.mapping is not None:
            source = source.mapping  # dict(model_output)
        if isinstance(source, DictVar):
            items.update(source.items)
        else:
            for pair in iterate(frame.tracer, source):
                key, value = iterate(frame.tracer, pair)
                items[python_value(key)] = value
    items.update(kwargs)
    return DictVar(items)


def _ordered_dict(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    made = _dict(frame, args, kwargs)
    assert isinstance(made, DictVar)
    return DictVar(made.items, dict_type=collections.OrderedDict)


def _deque(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    """``collections.deque(iterable)`` (a bounded one, ``maxlen=``, is not supported)."""
    maxlen = args[1] if len(args) > 1 else kwargs.get("maxlen", ConstVar(None))
    if set(kwargs) - {"maxlen", "iterable"} or python_value(maxlen) is not None:
        raise Unsupported("collections.deque with maxlen is not supported")
    source = args[0] if args else kwargs.get("iterable")
    items = iterate(frame.tracer, source) if source is not None else []
    return SequenceVar(list(items), is_list=True, is_deque=True)


def _counter(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    """``collections.Counter`` of constants: counted at capture time."""
    try:
        values = [
            python_value(SequenceVar(iterate(frame.tracer, arg)))
            if isinstance(arg, IteratorVar)
            else python_value(arg)
            for arg in args
        ]
        keywords = {key: python_value(item) for key, item in kwargs.items()}
    except NotConstant:
        raise Unsupported("collections.Counter over non-constants is not supported") from None
    return ConstVar(collections.Counter(*values, **keywords))


def _sum(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    total = args[1] if len(args) > 1 else kwargs.get("start", ConstVar(0))
    for item in iterate(frame.tracer, args[0]):
        total = apply_operator(frame.tracer, operator.add, total, item)
    return total


def _getattr(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    name = python_value(args[1])
    try:
        found = get_attribute(frame.tracer, args[0], name)
        if isinstance(found, PropertyGet):
            from torchstrata.capture.calls import call_function  # calls imports this

            return call_function(frame, found.getter, found.args, {})  # type: ignore[arg-type]
        return found
    except AttributeMissing:
        if len(args) > 2:
            return args[2]
        raise


def _hasattr(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    try:
        get_attribute(frame.tracer, args[0], python_value(args[1]))
    except AttributeMissing:
        return ConstVar(False)
    return ConstVar(True)


def _super(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    if args:
        cls, self_var = python_value(args[0]), args[1]
    else:
        first = frame.code.co_varnames[0] if frame.code.co_argcount else None
        if "__class__" not in frame.cells or first is None:
            raise Unsupported("super() outside a method is not supported")
        cls = python_value(frame.read_cell("__class__"))
        self_var = frame.read_cell(first) if first in frame.cells else frame.locals[first]
    if not isinstance(self_var, ObjectVar | UserObjectVar):
        raise Unsupported(f"super() with {describe(self_var)} is not supported")
    return SuperVar(cls, self_var)


def _abs(frame: FrameState, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    return apply_operator(frame.tracer, operator.abs, *args)


BUILTIN_HANDLERS: dict[Any, Handler] = {
    builtins.len: _len,
    builtins.isinstance: _isinstance,
    builtins.type: _type,
    builtins.enumerate: _enumerate,
    builtins.zip: _zip,
    builtins.reversed: _reversed,
    builtins.iter: _iter,
    builtins.next: _next,
    builtins.list: _sequence_of(is_list=True),
    builtins.tuple: _sequence_of(is_list=False),
    builtins.dict: _dict,
    collections.OrderedDict: _ordered_dict,
    collections.Counter: _counter,
    collections.deque: _deque,
    builtins.sum: _sum,
    builtins.getattr: _getattr,
    builtins.hasattr: _hasattr,
    builtins.super: _super,
    builtins.abs: _abs,
}


def call_builtin(
    frame: FrameState, fn: Any, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var | None:
    """The result of calling builtin ``fn``, or None when ``fn`` is not one capture handles."""
    if _hashable(fn) and fn in _DATA_DEPENDENT and args and isinstance(args[0], TensorVar):
        raise Unsupported(f"{_DATA_DEPENDENT[fn]}(tensor) makes the result depend on tensor values")
    handler = BUILTIN_HANDLERS.get(fn) if _hashable(fn) else None
    if handler is not None:
        try:
            return handler(frame, args, kwargs)
        except NotConstant:
            kinds = ", ".join(describe(arg) for arg in args)
            raise Unsupported(f"{fn.__name__}() on {kinds} is not supported") from None
    if not (_hashable(fn) and fn in PURE_BUILTINS) and not _constant_class(fn):
        return None
    # An iterator argument (a generator expression) is consumed into a tuple first.
    args = [
        SequenceVar(iterate(frame.tracer, arg)) if isinstance(arg, IteratorVar) else arg
        for arg in args
    ]
    if fn in _KEY_CONSUMERS and len(args) == 1 and isinstance(args[0], DictVar):
        # set(kwargs), sorted(outputs): what they iterate is the keys, all constants
        args = [SequenceVar([ConstVar(key) for key in args[0].items])]
    try:
        values = [python_value(arg) for arg in args]
        keywords = {key: python_value(value) for key, value in kwargs.items()}
    except NotConstant:
        kinds = ", ".join(describe(arg) for arg in args)
        raise Unsupported(f"{getattr(fn, '__name__', fn)}() on {kinds} is not supported") from None
    return fold(functools.partial(fn, **keywords), *values)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _constant_class(fn: Any) -> bool:
    constant_classes = (
        torch.Size, torch.device, torch.finfo, torch.iinfo, operator.itemgetter,
        operator.attrgetter, operator.methodcaller,
    )  # fmt: skip
    if isinstance(fn, enum.EnumMeta):  # Color(2): a member looked up by value
        return True
    return fn in constant_classes if _hashable(fn) else False
