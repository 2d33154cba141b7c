"""Methods of lists, tuples, dicts and deques called in traced code: evaluated on the
traced containers, and a mutation of a container the graph did not make (an argument, an
attribute, a global) logged as a side effect to replay after the graph."""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence

from torchstrata.capture.operators import fold
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import (
    ConstVar,
    DictVar,
    MethodVar,
    SequenceVar,
    Var,
    describe,
    python_value,
)


def call_container_method(
    tracer: Tracer, method: MethodVar, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var:
    owner, name = method.owner, method.name
    mutating = name in {
        "append",
        "extend",
        "pop",
        "insert",
        "reverse",
        "clear",
        "update",
        "setdefault",
        "sort",
        "popitem",
        "move_to_end",
        "appendleft",
        "popleft",
        "extendleft",
        "rotate",
    }
    if isinstance(owner, SequenceVar):
        if mutating and not owner.is_list:
            raise Unsupported(f"tuple has no method {name}()")
        result = _sequence_method(owner, name, args, kwargs)
    else:
        assert isinstance(owner, DictVar)
        result = _dict_method(owner, name, args, kwargs)
    if mutating and owner.source is not None:  # an argument, attribute or global: replayed
        tracer.side_effects.mutate_container(owner)
    return result


def _sequence_method(
    owner: SequenceVar, name: str, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var:
    items = owner.items
    if name == "_replace" and owner.field_names is not None:
        unknown = set(kwargs) - set(owner.field_names)
        if args or unknown:
            raise Unsupported(f"{name}() got unexpected arguments {sorted(unknown)}")
        replaced = [kwargs.get(f, item) for f, item in zip(owner.field_names, items)]
        return SequenceVar(replaced, field_names=owner.field_names, tuple_type=owner.tuple_type)
    if name == "_asdict" and owner.field_names is not None:
        return DictVar(dict(zip(owner.field_names, items)))
    if name == "sort":
        if set(kwargs) - {"reverse"}:
            raise Unsupported("list.sort(key=...) is not supported")
        reverse = bool(python_value(kwargs["reverse"])) if "reverse" in kwargs else False
        keys = [python_value(item) for item in items]
        order = sorted(range(len(items)), key=keys.__getitem__, reverse=reverse)
        items[:] = [items[i] for i in order]
    elif name == "append":
        items.append(args[0])
    elif name == "extend":
        if not isinstance(args[0], SequenceVar):
            raise Unsupported(f"list.extend with {describe(args[0])} is not supported")
        items.extend(args[0].items)
    elif name == "insert":
        items.insert(python_value(args[0]), args[1])
    elif name == "pop":
        return items.pop(python_value(args[0]) if args else -1)
    elif name == "reverse":
        items.reverse()
    elif name == "clear":
        items.clear()
    elif name == "copy":
        return SequenceVar(list(items), is_list=True, is_deque=owner.is_deque)
    elif name == "appendleft":
        items.insert(0, args[0])
    elif name == "extendleft":
        if not isinstance(args[0], SequenceVar):
            raise Unsupported(f"deque.extendleft with {describe(args[0])} is not supported")
        for item in args[0].items:
            items.insert(0, item)
    elif name in ("popleft", "rotate") and not items:
        if name == "popleft":
            raise Unsupported("deque.popleft() raised IndexError: the deque is empty")
    elif name == "popleft":
        return items.pop(0)
    elif name == "rotate":
        steps = python_value(args[0]) % len(items) if args else 1 % len(items)
        items[:] = items[len(items) - steps :] + items[: len(items) - steps]
    else:  # index, count: constants only
        return fold(getattr(python_value(owner), name), *[python_value(arg) for arg in args])
    return ConstVar(None)


def _reorder(owner: DictVar, name: str, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    """``popitem()`` (``OrderedDict.popitem(last=False)`` too) and
    ``OrderedDict.move_to_end(key, last=True)``."""
    items = owner.items
    ordered = owner.dict_type is collections.OrderedDict
    positional = args[1:] if name == "move_to_end" else args
    last = bool(python_value(kwargs.get("last", positional[0] if positional else ConstVar(True))))
    if name == "popitem":
        if not items:
            raise Unsupported("dict.popitem() raised KeyError: the dict is empty")
        key = next(iter(items)) if ordered and not last else next(reversed(items))
        return SequenceVar([ConstVar(key), items.pop(key)])
    key = python_value(args[0])
    if not ordered or key not in items:
        raise Unsupported(f"move_to_end({key!r}) on {describe(owner)}")
    value = items.pop(key)
    if last:
        items[key] = value
    else:
        rest = dict(items)
        items.clear()
        items[key] = value
        items.update(rest)
    return ConstVar(None)


def _dict_method(owner: DictVar, name: str, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    items = owner.items
    if name == "items":
        return SequenceVar([SequenceVar([ConstVar(k), v]) for k, v in items.items()])
    if name == "keys":
        return SequenceVar([ConstVar(k) for k in items])
    if name == "values":
        return SequenceVar(list(items.values()))
    if name == "copy":
        return DictVar(dict(items), dict_type=owner.dict_type)
    if name == "clear":
        items.clear()
        return ConstVar(None)
    if name in ("popitem", "move_to_end"):
        return _reorder(owner, name, args, kwargs)
    key = python_value(args[0]) if args else None
    if name == "get":
        return items.get(key, args[1] if len(args) > 1 else ConstVar(None))
    if name == "setdefault":
        return items.setdefault(key, args[1] if len(args) > 1 else ConstVar(None))
    if name == "pop":
        if key in items:
            return items.pop(key)
        if len(args) > 1:
            return args[1]
        raise Unsupported(f"dict.pop raised KeyError: {key!r}")
    if name == "update":
        if args:
            update = args[0]
            if not isinstance(update, DictVar):
                raise Unsupported(f"dict.update with {describe(update)} is not supported")
            items.update(update.items)
        items.update(kwargs)
        return ConstVar(None)
    raise Unsupported(f"dict.{name}() is not supported")
