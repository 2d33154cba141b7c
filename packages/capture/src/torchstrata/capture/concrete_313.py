"""Running the instructions CPython 3.13 added for real (after a graph break): the fused
local loads and stores, ``CALL_KW``, ``TO_BOOL``, ``SET_FUNCTION_ATTRIBUTE`` and the
split f-string formatting. What they do is :mod:`.opcodes_313`'s, on real values."""

from __future__ import annotations

import dis
from typing import Any

from torchstrata.capture.concrete_data import load_fast
from torchstrata.capture.concrete_flow import FLOW_STEPS
from torchstrata.capture.concrete_state import State, Step, arg, registrar
from torchstrata.capture.opcodes_313 import CONVERSIONS
from torchstrata.capture.rebuild import NullValue

#: How these instructions run for real, by ``dis`` name.
PY313_STEPS: dict[str, Step] = {}
on = registrar(PY313_STEPS)


def _store(state: State, name: str) -> None:
    value = state.stack.pop()
    if isinstance(value, NullValue):  # restoring a name LOAD_FAST_AND_CLEAR cleared
        state.locals.pop(name, None)
    else:
        state.locals[name] = value


@on("LOAD_FAST_LOAD_FAST")
def _load_fast_load_fast(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    for name in inst.argval:
        load_fast(state, name)


@on("STORE_FAST_LOAD_FAST")
def _store_fast_load_fast(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    stored, loaded = inst.argval
    _store(state, stored)
    load_fast(state, loaded)


@on("STORE_FAST_STORE_FAST")
def _store_fast_store_fast(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    for name in inst.argval:  # the first name takes the top of the stack
        _store(state, name)


@on("CALL_KW")
def _call_kw(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.kw_names = tuple(state.stack.pop())
    FLOW_STEPS["CALL"](state, inst, g)


@on("TO_BOOL")
def _to_bool(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.stack.append(bool(state.stack.pop()))


@on("SET_FUNCTION_ATTRIBUTE")
def _set_function_attribute(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    function, value = state.stack.pop(), state.stack.pop()
    flag = arg(inst)
    if flag == 0x08:  # set first; __closure__ is read-only, so the function is made again
        function = type(function)(
            function.__code__, function.__globals__, function.__name__, None, tuple(value)
        )
    elif flag == 0x04:
        pairs = list(value) if not isinstance(value, dict) else [*value.items()]
        if pairs and not isinstance(pairs[0], tuple):  # 3.13: a flat (name, value, ...) tuple
            pairs = list(zip(pairs[::2], pairs[1::2]))
        function.__annotations__ = dict(pairs)
    elif flag == 0x02:
        function.__kwdefaults__ = value
    elif flag == 0x01:
        function.__defaults__ = tuple(value)
    state.stack.append(function)


@on("CONVERT_VALUE")
def _convert_value(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.stack.append(CONVERSIONS[arg(inst)](state.stack.pop()))


@on("FORMAT_SIMPLE")
def _format_simple(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.stack.append(format(state.stack.pop()))


@on("FORMAT_WITH_SPEC")
def _format_with_spec(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    spec = state.stack.pop()
    state.stack.append(format(state.stack.pop(), spec))
