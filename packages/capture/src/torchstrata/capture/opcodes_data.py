"""Opcode handlers for data: constants, locals, cells, globals, attributes, operators,
subscripts, and building/unpacking containers (CPython 3.11 and 3.12)."""

from __future__ import annotations

import builtins
import dis
import inspect
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torchstrata.capture.attributes import get_attribute
from torchstrata.capture.counters import CounterVar, is_increment, read_counter, specialise, step
from torchstrata.capture.indexing import delete_subscript, store_subscript, subscript
from torchstrata.capture.iteration import iterate
from torchstrata.capture.mapping_objects import subscript_items
from torchstrata.capture.operators import (
    BINARY_OPERATORS,
    UNARY_OPERATORS,
    apply_operator,
    contains,
    identical,
    truth,
)
from torchstrata.capture.stores import delete_attribute, store_attribute
from torchstrata.capture.tracer import Unsupported
from torchstrata.capture.user_objects import PropertyGet, UserObjectVar
from torchstrata.capture.variables import (
    NULL,
    BoundMethodVar,
    Cell,
    CellVar,
    ConstVar,
    DictVar,
    ObjectVar,
    SequenceVar,
    SuperVar,
    TensorVar,
    Var,
    _Null,
    describe,
    python_value,
)
from torchstrata.core import specialise_sizes

if TYPE_CHECKING:  # the frame type is only needed for annotations
    from torchstrata.capture.frame import Frame

Handler = Callable[["Frame", dis.Instruction], Any]
DATA_HANDLERS: dict[str, Handler] = {}


def handles(*opnames: str) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of ``opnames`` in this module's table."""

    def register(handler: Handler) -> Handler:
        for opname in opnames:
            DATA_HANDLERS[opname] = handler
        return handler

    return register


def _arg(inst: dis.Instruction) -> int:
    """The integer argument of an instruction that has one."""
    assert inst.arg is not None, inst
    return inst.arg


@handles("NOP", "RESUME", "EXTENDED_ARG", "PRECALL", "COPY_FREE_VARS", "CACHE")
def _nothing(frame: Frame, inst: dis.Instruction) -> None:
    return None


# ---------------------------------------------------------------------- stack
@handles("POP_TOP")
def _pop_top(frame: Frame, inst: dis.Instruction) -> None:
    frame.pop_any()


@handles("PUSH_NULL")
def _push_null(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(NULL)


@handles("COPY")
def _copy(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(frame.stack[-_arg(inst)])


@handles("SWAP")
def _swap(frame: Frame, inst: dis.Instruction) -> None:
    stack = frame.stack
    stack[-1], stack[-_arg(inst)] = stack[-_arg(inst)], stack[-1]


@handles("LOAD_CONST")
def _load_const(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(ConstVar(inst.argval))


# ---------------------------------------------------------------------- locals and cells
@handles("LOAD_FAST", "LOAD_FAST_CHECK")
def _load_fast(frame: Frame, inst: dis.Instruction) -> None:
    load_fast(frame, inst.argval)


def load_fast(frame: Frame, name: str) -> None:
    """``LOAD_FAST name``; of a cell or free variable, its cell (3.13 compiles
    ``LOAD_CLOSURE`` to ``LOAD_FAST``)."""
    if name in frame.code.co_cellvars or name in frame.code.co_freevars:
        frame.push(_closure_cell(frame, name))
        return
    if name not in frame.locals:
        raise Unsupported(f"local variable {name!r} referenced before assignment")
    frame.push(frame.locals[name])


@handles("LOAD_FAST_AND_CLEAR")
def _load_fast_and_clear(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(frame.locals.pop(inst.argval, NULL))  # 3.12 inlined comprehensions


@handles("STORE_FAST")
def _store_fast(frame: Frame, inst: dis.Instruction) -> None:
    value = frame.pop_any()
    if isinstance(value, _Null):  # restoring a name cleared by LOAD_FAST_AND_CLEAR
        frame.locals.pop(inst.argval, None)
    else:
        frame.locals[inst.argval] = value


@handles("DELETE_FAST")
def _delete_fast(frame: Frame, inst: dis.Instruction) -> None:
    frame.locals.pop(inst.argval, None)


@handles("MAKE_CELL")
def _make_cell(frame: Frame, inst: dis.Instruction) -> None:
    from_local = frame.locals.pop(inst.argval, None)
    frame.cells[inst.argval] = _new_cell(from_local)


def _new_cell(value: Any) -> Cell:
    return Cell(var=value)


@handles("LOAD_DEREF")
def _load_deref(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(frame.read_cell(inst.argval))


@handles("STORE_DEREF")
def _store_deref(frame: Frame, inst: dis.Instruction) -> None:
    value = frame.pop()
    if inst.argval not in frame.cells:
        frame.cells[inst.argval] = _new_cell(None)
    cell = frame.cells[inst.argval]
    cell.var, cell.pending = value, None
    if cell.origin is not None:  # a cell of a function defined outside the trace
        frame.tracer.side_effects.store_cell(cell)


@handles("LOAD_CLOSURE")
def _load_closure(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(_closure_cell(frame, inst.argval))


def _closure_cell(frame: Frame, name: str) -> CellVar:
    if name not in frame.cells:
        frame.cells[name] = _new_cell(None)
    return CellVar(frame.cells[name])


# ---------------------------------------------------------------------- globals
@handles("LOAD_BUILD_CLASS")
def _load_build_class(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(ObjectVar(builtins.__build_class__))


@handles("LOAD_GLOBAL")
def _load_global(frame: Frame, inst: dis.Instruction) -> None:
    if _arg(inst) & 1:  # 3.11 and 3.12: push NULL first
        frame.push(NULL)
    name = inst.argval
    stored = frame.tracer.side_effects.load_global(frame.globals, name)
    increment = not _arg(inst) & 1 and _starts_increment(frame, inst, "STORE_GLOBAL", False)
    if isinstance(stored, CounterVar):
        frame.push(stored if increment else specialise(frame.tracer, stored))
        return
    if stored is not None:  # assigned earlier in this trace
        frame.push(stored)
        return
    if name in frame.globals:
        source = f"{frame.globals_source}[{name!r}]" if frame.globals_source else None
        value = frame.globals[name]
        counter = read_counter(frame.tracer, source, value) if increment and source else None
        frame.push(frame.tracer.wrap(value, source) if counter is None else counter)
        return
    if hasattr(builtins, name):
        frame.push(ObjectVar(getattr(builtins, name)))
        return
    raise Unsupported(f"name {name!r} is not defined")


# ---------------------------------------------------------------------- attributes
@handles("LOAD_ATTR")
def _load_attr(frame: Frame, inst: dis.Instruction) -> None:
    # 3.12 folds LOAD_METHOD into LOAD_ATTR: the low bit of the arg asks for the
    # method form, which pushes [NULL, attribute] here (CALL accepts either layout).
    method_form = _is_312_method_load(inst)
    owner = frame.pop()
    if method_form:
        frame.push(NULL)
    elif _starts_increment(frame, inst, "STORE_ATTR", True):
        counter = _attribute_counter(frame, owner, inst.argval)
        if counter is not None:
            frame.push(counter)
            return
    frame.push(resolve_property(frame, get_attribute(frame.tracer, owner, inst.argval)))


def _starts_increment(frame: Frame, inst: dis.Instruction, store: str, owner: bool) -> bool:
    index = frame.index_of(inst.offset)
    return is_increment(frame.instructions, index, inst.argval, store, owner)


def _attribute_counter(frame: Frame, owner: Var, name: str) -> CounterVar | None:
    """``owner.name`` as a counter (:mod:`.counters`): an int in the instance dict of an
    object with a source, not shadowed by a data descriptor of its class."""
    if not isinstance(owner, ObjectVar) or owner.source is None:
        return None
    obj = owner.value
    stored = frame.tracer.side_effects.load_attribute(obj, name)
    if isinstance(stored, CounterVar):  # incremented again in this trace
        return stored
    instance_dict = getattr(obj, "__dict__", None)
    if stored is not None or not isinstance(instance_dict, dict) or name not in instance_dict:
        return None
    if hasattr(type(inspect.getattr_static(type(obj), name, None)), "__set__"):
        return None
    return read_counter(frame.tracer, f"{owner.source}.{name}", instance_dict[name])


def resolve_property(frame: Frame, var: Var) -> Var:
    """The value of a property of an object made in the trace: its getter, inlined."""
    if isinstance(var, PropertyGet):
        from torchstrata.capture.calls import call_function  # calls imports the frame

        return call_function(frame, var.getter, var.args, {})
    return var


def _is_312_method_load(inst: dis.Instruction) -> bool:
    return sys.version_info >= (3, 12) and bool(_arg(inst) & 1)


@handles("LOAD_METHOD")
def _load_method(frame: Frame, inst: dis.Instruction) -> None:
    owner = frame.pop()
    frame.push(NULL)
    frame.push(resolve_property(frame, get_attribute(frame.tracer, owner, inst.argval)))


@handles("LOAD_SUPER_ATTR")
def _load_super_attr(frame: Frame, inst: dis.Instruction) -> None:
    self_var, cls, _super = frame.pop(), frame.pop(), frame.pop()
    if not isinstance(self_var, ObjectVar | UserObjectVar):
        raise Unsupported(f"super() with {describe(self_var)} is not supported")
    if _arg(inst) & 1:
        frame.push(NULL)
    frame.push(get_attribute(frame.tracer, SuperVar(python_value(cls), self_var), inst.argval))


@handles("STORE_ATTR")
def _store_attr(frame: Frame, inst: dis.Instruction) -> None:
    owner, value = frame.pop(), frame.pop()
    if isinstance(owner, UserObjectVar):
        setter = inspect.getattr_static(owner.cls, "__setattr__")
        if isinstance(setter, types.FunctionType):  # the class's own: inlined
            _call_method(frame, setter, owner, [ConstVar(inst.argval), value])
            return
    store_attribute(frame.tracer, owner, inst.argval, value)


def _call_method(frame: Frame, function: Any, owner: Var, args: list[Var]) -> Var:
    from torchstrata.capture.calls import call_function  # calls imports the frame

    return call_function(frame, BoundMethodVar(ObjectVar(function), owner), args, {})


def _object_dunder(var: Var, name: str) -> Any:
    """The Python ``__getitem__``/``__setitem__`` of an object made in the trace, or None."""
    if not isinstance(var, UserObjectVar):
        return None
    method = inspect.getattr_static(var.cls, name, None)
    return method if isinstance(method, types.FunctionType) else None


@handles("DELETE_ATTR")
def _delete_attr(frame: Frame, inst: dis.Instruction) -> None:
    delete_attribute(frame.tracer, frame.pop(), inst.argval)


@handles("STORE_GLOBAL")
def _store_global(frame: Frame, inst: dis.Instruction) -> None:
    frame.tracer.side_effects.store_global(frame.globals, inst.argval, frame.pop())


# ---------------------------------------------------------------------- operators
@handles("BINARY_OP", "COMPARE_OP")
def _binary_op(frame: Frame, inst: dis.Instruction) -> None:
    symbol = inst.argrepr if inst.opname == "BINARY_OP" else inst.argval
    fn = BINARY_OPERATORS.get(symbol)
    if fn is None:
        raise Unsupported(f"operator {symbol!r} is not supported")
    right = frame.pop()
    left = frame.pop()
    if isinstance(left, CounterVar):
        stepped = step(left, symbol, right)
        if stepped is not None:
            frame.push(stepped)
            return
        left = specialise(frame.tracer, left)
    if isinstance(right, CounterVar):
        right = specialise(frame.tracer, right)
    frame.push(apply_operator(frame.tracer, fn, left, right))


@handles("UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT")
def _unary_op(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(apply_operator(frame.tracer, UNARY_OPERATORS[inst.opname], frame.pop()))


@handles("UNARY_NOT")
def _unary_not(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(ConstVar(not truth(frame.pop(), "'not'")))


@handles("CALL_INTRINSIC_1")
def _call_intrinsic_1(frame: Frame, inst: dis.Instruction) -> None:
    if inst.argrepr == "INTRINSIC_UNARY_POSITIVE":
        frame.push(apply_operator(frame.tracer, UNARY_OPERATORS[inst.argrepr], frame.pop()))
    elif inst.argrepr == "INTRINSIC_LIST_TO_TUPLE":
        frame.push(SequenceVar(iterate(frame.tracer, frame.pop())))
    else:
        raise Unsupported(f"intrinsic {inst.argrepr} is not supported")


@handles("IS_OP")
def _is_op(frame: Frame, inst: dis.Instruction) -> None:
    right, left = frame.pop(), frame.pop()
    frame.push(ConstVar(identical(left, right) != bool(_arg(inst))))


@handles("CONTAINS_OP")
def _contains_op(frame: Frame, inst: dis.Instruction) -> None:
    container, item = frame.pop(), frame.pop()
    frame.push(ConstVar(contains(container, item) != bool(_arg(inst))))


# ---------------------------------------------------------------------- subscripts
@handles("BINARY_SUBSCR")
def _binary_subscr(frame: Frame, inst: dis.Instruction) -> None:
    index = frame.pop()
    container = frame.pop()
    method = _object_dunder(container, "__getitem__")
    if method is not None:
        frame.push(_call_method(frame, method, container, [index]))
    elif isinstance(container, UserObjectVar) and container.mapping is not None:
        frame.push(subscript_items(container, index))
    else:
        frame.push(subscript(frame.tracer, container, index))


@handles("BINARY_SLICE")
def _binary_slice(frame: Frame, inst: dis.Instruction) -> None:
    stop, start = frame.pop(), frame.pop()
    container = frame.pop()
    index = ConstVar(slice(_slice_part(start), _slice_part(stop)))
    frame.push(subscript(frame.tracer, container, index))


def _slice_part(var: Any) -> Any:
    if isinstance(var, TensorVar):
        raise Unsupported("a tensor as a slice bound makes the result depend on tensor values")
    return python_value(var)


@handles("STORE_SLICE")
def _store_slice(frame: Frame, inst: dis.Instruction) -> None:
    stop, start = frame.pop(), frame.pop()
    container, value = frame.pop(), frame.pop()
    index = ConstVar(slice(_slice_part(start), _slice_part(stop)))
    store_subscript(frame.tracer, container, index, value)


@handles("DELETE_SUBSCR")
def _delete_subscr(frame: Frame, inst: dis.Instruction) -> None:
    index, container = frame.pop(), frame.pop()
    delete_subscript(frame.tracer, container, index)


@handles("BUILD_SLICE")
def _build_slice(frame: Frame, inst: dis.Instruction) -> None:
    parts = frame.pop_n(_arg(inst))
    frame.push(ConstVar(slice(*[_slice_part(part) for part in parts])))


@handles("STORE_SUBSCR")
def _store_subscr(frame: Frame, inst: dis.Instruction) -> None:
    index, container, value = frame.pop(), frame.pop(), frame.pop()
    method = _object_dunder(container, "__setitem__")
    if method is not None:
        _call_method(frame, method, container, [index, value])
    elif isinstance(container, UserObjectVar) and container.mapping is not None:
        container.mapping.items[python_value(index)] = value
    else:
        store_subscript(frame.tracer, container, index, value)


# ---------------------------------------------------------------------- containers
@handles("BUILD_TUPLE", "BUILD_LIST")
def _build_sequence(frame: Frame, inst: dis.Instruction) -> None:
    items = frame.pop_n(_arg(inst))
    frame.push(SequenceVar(items, is_list=inst.opname == "BUILD_LIST"))


@handles("LIST_TO_TUPLE")
def _list_to_tuple(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(SequenceVar(iterate(frame.tracer, frame.pop())))


def _building(frame: Frame, inst: dis.Instruction) -> Any:
    """The container a ``LIST_APPEND``/``MAP_ADD``/... adds to: one this frame's
    ``BUILD_*`` made and that has not escaped (a display, a 3.12 inlined comprehension).
    After a graph break it was re-read from the value stack (source ``S[i]``): drop that
    source, so rebuilding it at a later break or return uses its items, added ones included,
    instead of re-reading the real container, which the added items never reached."""
    target = frame.stack[-_arg(inst)]
    if isinstance(target, SequenceVar | DictVar):
        target.source = None
    return target


@handles("LIST_APPEND")
def _list_append(frame: Frame, inst: dis.Instruction) -> None:
    value = frame.pop()
    target = _building(frame, inst)
    assert isinstance(target, SequenceVar)
    target.items.append(value)


@handles("LIST_EXTEND")
def _list_extend(frame: Frame, inst: dis.Instruction) -> None:
    values = iterate(frame.tracer, frame.pop())
    target = _building(frame, inst)
    assert isinstance(target, SequenceVar)
    target.items.extend(values)


@handles("BUILD_MAP")
def _build_map(frame: Frame, inst: dis.Instruction) -> None:
    flat = frame.pop_n(2 * _arg(inst))
    frame.push(DictVar({python_value(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}))


@handles("BUILD_CONST_KEY_MAP")
def _build_const_key_map(frame: Frame, inst: dis.Instruction) -> None:
    keys = python_value(frame.pop())
    values = frame.pop_n(_arg(inst))
    frame.push(DictVar(dict(zip(keys, values))))


@handles("MAP_ADD")
def _map_add(frame: Frame, inst: dis.Instruction) -> None:
    value, key = frame.pop(), frame.pop()
    target = _building(frame, inst)
    assert isinstance(target, DictVar)
    target.items[python_value(key)] = value


@handles("DICT_UPDATE", "DICT_MERGE")
def _dict_update(frame: Frame, inst: dis.Instruction) -> None:
    update = frame.pop()
    if not isinstance(update, DictVar):
        raise Unsupported(f"** with {describe(update)} is not supported")
    target = _building(frame, inst)
    assert isinstance(target, DictVar)
    target.items.update(update.items)


@handles("UNPACK_SEQUENCE")
def _unpack_sequence(frame: Frame, inst: dis.Instruction) -> None:
    items = iterate(frame.tracer, frame.pop())
    if len(items) != _arg(inst):
        raise Unsupported(f"cannot unpack {len(items)} values into {_arg(inst)} names")
    for item in reversed(items):
        frame.push(item)


@handles("UNPACK_EX")
def _unpack_ex(frame: Frame, inst: dis.Instruction) -> None:
    before, after = _arg(inst) & 0xFF, _arg(inst) >> 8
    items = iterate(frame.tracer, frame.pop())
    if len(items) < before + after:
        raise Unsupported(f"not enough values to unpack (expected at least {before + after})")
    middle = items[before : len(items) - after]
    for item in reversed(items[len(items) - after :]):
        frame.push(item)
    frame.push(SequenceVar(middle, is_list=True))
    for item in reversed(items[:before]):
        frame.push(item)


@handles("FORMAT_VALUE")
def _format_value(frame: Frame, inst: dis.Instruction) -> None:
    spec = python_value(frame.pop()) if _arg(inst) & 0x04 else ""
    value = frame.pop()
    if isinstance(value, TensorVar):
        raise Unsupported("formatting a tensor into a string depends on its values")
    converted = specialise_sizes(python_value(value))  # a symbolic size prints its value
    conversion = _arg(inst) & 0x03
    if conversion == 1:
        converted = str(converted)
    elif conversion == 2:
        converted = repr(converted)
    elif conversion == 3:
        converted = ascii(converted)
    frame.push(ConstVar(format(converted, spec)))


@handles("BUILD_STRING")
def _build_string(frame: Frame, inst: dis.Instruction) -> None:
    parts = frame.pop_n(_arg(inst))
    frame.push(ConstVar("".join(python_value(part) for part in parts)))


# ---------------------------------------------------------------------- sets
@handles("BUILD_SET")
def _build_set(frame: Frame, inst: dis.Instruction) -> None:
    items = frame.pop_n(_arg(inst))
    if any(isinstance(item, TensorVar) for item in items):
        raise Unsupported("sets of tensors are not supported")
    frame.push(ConstVar({python_value(item) for item in items}))


@handles("SET_ADD", "SET_UPDATE")
def _set_add(frame: Frame, inst: dis.Instruction) -> None:
    value = frame.pop()
    target = frame.stack[-_arg(inst)]
    assert isinstance(target, ConstVar) and isinstance(target.value, set)
    if inst.opname == "SET_ADD":
        target.value.add(python_value(value))
    else:
        target.value.update(python_value(SequenceVar(iterate(frame.tracer, value))))
