"""Running data instructions for real: locals, cells, globals, attributes, operators,
subscripts, containers, strings."""

from __future__ import annotations

import builtins
import dis
import sys
import types
from collections.abc import Callable
from typing import Any

from torchstrata.capture.concrete_state import State, Step, arg, pop, registrar
from torchstrata.capture.operators import BINARY_OPERATORS, UNARY_OPERATORS
from torchstrata.capture.rebuild import NULL_VALUE, NullValue

#: How these instructions run for real, by ``dis`` name.
DATA_STEPS: dict[str, Step] = {}
on = registrar(DATA_STEPS)


@on("NOP", "RESUME", "PRECALL", "EXTENDED_ARG", "CACHE", "COPY_FREE_VARS")
def _nop(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    return None


@on("POP_TOP")
def _pop_top(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.stack.pop()


@on("PUSH_NULL")
def _push_null(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.stack.append(NULL_VALUE)


@on("COPY")
def _copy(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.stack.append(state.stack[-arg(inst)])


@on("SWAP")
def _swap(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    s = state.stack
    s[-1], s[-arg(inst)] = s[-arg(inst)], s[-1]


@on("LOAD_CONST")
def _load_const(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.stack.append(inst.argval)


@on("LOAD_FAST", "LOAD_FAST_CHECK")
def _load_fast(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    load_fast(state, inst.argval)


def load_fast(state: State, name: str) -> None:
    """``LOAD_FAST name``; of a cell variable, its cell (3.13's ``LOAD_CLOSURE``)."""
    if name not in state.locals and name in state.cells:
        state.stack.append(state.cells[name])
        return
    if name not in state.locals:
        raise UnboundLocalError(f"local variable {name!r} referenced before assignment")
    state.stack.append(state.locals[name])


@on("LOAD_FAST_AND_CLEAR")
def _load_fast_clear(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.stack.append(state.locals.pop(inst.argval, NULL_VALUE))


@on("STORE_FAST")
def _store_fast(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    value = state.stack.pop()
    if isinstance(value, NullValue):
        state.locals.pop(inst.argval, None)
    else:
        state.locals[inst.argval] = value


@on("DELETE_FAST")
def _delete_fast(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    del state.locals[inst.argval]


@on("MAKE_CELL")
def _make_cell(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    cell = types.CellType()
    if inst.argval in state.locals:
        cell.cell_contents = state.locals.pop(inst.argval)
    state.cells[inst.argval] = cell


@on("LOAD_DEREF", "LOAD_CLOSURE")
def _load_deref(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    cell = state.cells.setdefault(inst.argval, types.CellType())
    state.stack.append(cell if inst.opname == "LOAD_CLOSURE" else cell.cell_contents)


@on("STORE_DEREF")
def _store_deref(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.cells.setdefault(inst.argval, types.CellType()).cell_contents = state.stack.pop()


@on("LOAD_BUILD_CLASS")
def _load_build_class(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.stack.append(builtins.__build_class__)


@on("LOAD_GLOBAL")
def _load_global(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    if arg(inst) & 1:
        state.stack.append(NULL_VALUE)
    name = inst.argval
    if name in g:
        state.stack.append(g[name])
    elif hasattr(builtins, name):
        state.stack.append(getattr(builtins, name))
    else:
        raise NameError(f"name {name!r} is not defined")


@on("STORE_GLOBAL")
def _store_global(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    g[inst.argval] = state.stack.pop()


@on("LOAD_ATTR", "LOAD_METHOD")
def _load_attr(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    owner = state.stack.pop()
    method = inst.opname == "LOAD_METHOD" or (sys.version_info >= (3, 12) and arg(inst) & 1)
    if method:
        state.stack.append(NULL_VALUE)
    state.stack.append(getattr(owner, inst.argval))


@on("LOAD_SUPER_ATTR")
def _load_super_attr(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    self_value, cls, super_fn = pop(state, 3)
    if arg(inst) & 1:
        state.stack.append(NULL_VALUE)
    state.stack.append(getattr(super_fn(cls, self_value), inst.argval))


@on("STORE_ATTR")
def _store_attr(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    owner, value = state.stack.pop(), state.stack.pop()
    setattr(owner, inst.argval, value)


@on("DELETE_ATTR")
def _delete_attr(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    delattr(state.stack.pop(), inst.argval)


@on("BINARY_OP", "COMPARE_OP")
def _binary(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    symbol = inst.argrepr if inst.opname == "BINARY_OP" else inst.argval
    left, right = pop(state, 2)
    state.stack.append(BINARY_OPERATORS[symbol](left, right))


@on("UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT")
def _unary(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.stack.append(UNARY_OPERATORS[inst.opname](state.stack.pop()))


@on("UNARY_NOT")
def _not(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.stack.append(not state.stack.pop())


@on("CALL_INTRINSIC_1")
def _intrinsic(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    value = state.stack.pop()
    if inst.argrepr == "INTRINSIC_UNARY_POSITIVE":
        state.stack.append(+value)
    elif inst.argrepr == "INTRINSIC_LIST_TO_TUPLE":
        state.stack.append(tuple(value))
    else:
        raise NotImplementedError(f"intrinsic {inst.argrepr}")


@on("IS_OP")
def _is(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    left, right = pop(state, 2)
    state.stack.append((left is right) != bool(arg(inst)))


@on("CONTAINS_OP")
def _contains(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    item, container = pop(state, 2)
    state.stack.append((item in container) != bool(arg(inst)))


@on("BINARY_SUBSCR")
def _subscr(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    container, index = pop(state, 2)
    state.stack.append(container[index])


@on("BINARY_SLICE")
def _slice(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    container, start, stop = pop(state, 3)
    state.stack.append(container[start:stop])


@on("STORE_SLICE")
def _store_slice(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    value, container, start, stop = pop(state, 4)
    container[start:stop] = value


@on("BUILD_SLICE")
def _build_slice(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.stack.append(slice(*pop(state, arg(inst))))


@on("STORE_SUBSCR")
def _store_subscr(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    value, container, index = pop(state, 3)
    container[index] = value


@on("DELETE_SUBSCR")
def _delete_subscr(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    container, index = pop(state, 2)
    del container[index]


@on("BUILD_TUPLE", "BUILD_LIST", "BUILD_SET")
def _build(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    kind = {"BUILD_TUPLE": tuple, "BUILD_LIST": list, "BUILD_SET": set}[inst.opname]
    state.stack.append(kind(pop(state, arg(inst))))


@on("LIST_TO_TUPLE")
def _list_to_tuple(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.stack.append(tuple(state.stack.pop()))


@on("LIST_APPEND", "SET_ADD")
def _append(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    value = state.stack.pop()
    target = state.stack[-arg(inst)]
    target.append(value) if isinstance(target, list) else target.add(value)


@on("LIST_EXTEND", "SET_UPDATE", "DICT_UPDATE", "DICT_MERGE")
def _extend(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    value = state.stack.pop()
    target = state.stack[-arg(inst)]
    target.extend(value) if isinstance(target, list) else target.update(value)


@on("BUILD_MAP")
def _build_map(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    flat = pop(state, 2 * arg(inst))
    state.stack.append({flat[i]: flat[i + 1] for i in range(0, len(flat), 2)})


@on("BUILD_CONST_KEY_MAP")
def _build_const_key_map(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    keys = state.stack.pop()
    state.stack.append(dict(zip(keys, pop(state, arg(inst)))))


@on("MAP_ADD")
def _map_add(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    key, value = pop(state, 2)
    state.stack[-arg(inst)][key] = value


@on("UNPACK_SEQUENCE")
def _unpack(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    items = list(state.stack.pop())
    if len(items) != arg(inst):
        raise ValueError(f"cannot unpack {len(items)} values into {arg(inst)} names")
    state.stack.extend(reversed(items))


@on("UNPACK_EX")
def _unpack_ex(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    before, after = arg(inst) & 0xFF, arg(inst) >> 8
    items = list(state.stack.pop())
    if len(items) < before + after:
        raise ValueError(f"not enough values to unpack (expected at least {before + after})")
    state.stack.extend(reversed(items[len(items) - after :]))
    state.stack.append(items[before : len(items) - after])
    state.stack.extend(reversed(items[:before]))


@on("FORMAT_VALUE")
def _format(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    spec = state.stack.pop() if arg(inst) & 0x04 else ""
    value = state.stack.pop()
    conversions: dict[int, Callable[[Any], Any]] = {0: _same, 1: str, 2: repr, 3: ascii}
    convert = conversions[arg(inst) & 0x03]
    state.stack.append(format(convert(value), spec))


def _same(value: Any) -> Any:
    return value


@on("BUILD_STRING")
def _build_string(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.stack.append("".join(pop(state, arg(inst))))
