"""Running control-flow instructions for real: jumps, loops, calls, function creation,
imports, raise, ``with`` entry, returns."""

from __future__ import annotations

import dis
import sys
import types
from typing import Any

from torchstrata.capture.concrete_state import Returned, State, Step, arg, pop, registrar
from torchstrata.capture.rebuild import NullValue, ResumeIterator

#: How these instructions run for real, by ``dis`` name.
FLOW_STEPS: dict[str, Step] = {}
on = registrar(FLOW_STEPS)


@on("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT")
def _jump(state: State, inst: dis.Instruction, g: dict[str, Any]) -> int:
    return int(inst.argval)


@on(
    "POP_JUMP_IF_TRUE", "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE",
    "POP_JUMP_IF_FALSE", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE",
    "POP_JUMP_IF_NONE", "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NONE",
    "POP_JUMP_IF_NOT_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE",
)  # fmt: skip
def _pop_jump(state: State, inst: dis.Instruction, g: dict[str, Any]) -> int | None:
    value = state.stack.pop()
    if "NONE" in inst.opname:
        taken = (value is None) != ("NOT_NONE" in inst.opname)
    else:
        taken = bool(value) == inst.opname.endswith("TRUE")
    return int(inst.argval) if taken else None


@on("JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP")
def _jump_orpop(state: State, inst: dis.Instruction, g: dict[str, Any]) -> int | None:
    if bool(state.stack[-1]) == (inst.opname == "JUMP_IF_TRUE_OR_POP"):
        return int(inst.argval)
    state.stack.pop()
    return None


@on("GET_ITER")
def _get_iter(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    value = state.stack.pop()
    plain = isinstance(value, list | tuple | range | dict | str)
    state.stack.append(ResumeIterator(list(value)) if plain else iter(value))


@on("FOR_ITER")
def _for_iter(state: State, inst: dis.Instruction, g: dict[str, Any]) -> int | None:
    try:
        state.stack.append(next(state.stack[-1]))
    except StopIteration:
        state.stack.pop()
        return int(inst.argval)
    return None


@on("END_FOR")
def _end_for(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    pop(state, 1 if sys.version_info >= (3, 13) else 2)


@on("CALL")
def _call(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    kw_names, state.kw_names = state.kw_names, ()
    args = pop(state, arg(inst))
    first, second = pop(state, 2)
    if isinstance(first, NullValue):
        fn = second
    elif isinstance(second, NullValue):  # 3.13: [callable, NULL, *args]
        fn = first
    else:
        fn, args = first, [second, *args]
    split = len(args) - len(kw_names)
    state.stack.append(fn(*args[:split], **dict(zip(kw_names, args[split:]))))


@on("CALL_FUNCTION_EX")
def _call_ex(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    kwargs = state.stack.pop() if arg(inst) & 1 else {}
    args, fn = state.stack.pop(), state.stack.pop()
    if isinstance(fn, NullValue):  # 3.13: [callable, NULL, args]
        fn = state.stack.pop()
    elif state.stack and isinstance(state.stack[-1], NullValue):
        state.stack.pop()
    state.stack.append(fn(*args, **kwargs))


@on("MAKE_FUNCTION")
def _make_function(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    code = state.stack.pop()
    flags = arg(inst) or 0
    closure = tuple(state.stack.pop()) if flags & 0x08 else None
    annotations = state.stack.pop() if flags & 0x04 else None
    kwdefaults = state.stack.pop() if flags & 0x02 else None
    defaults = tuple(state.stack.pop()) if flags & 0x01 else None
    if closure is None and code.co_freevars:  # 3.13: SET_FUNCTION_ATTRIBUTE sets it next
        closure = tuple(types.CellType() for _ in code.co_freevars)
    fn = types.FunctionType(code, g, code.co_name, defaults, closure)
    fn.__kwdefaults__ = kwdefaults
    if annotations is not None:
        fn.__annotations__ = dict(annotations) if isinstance(annotations, dict) else {}
    state.stack.append(fn)


@on("IMPORT_NAME")
def _import_name(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    level, fromlist = pop(state, 2)
    state.stack.append(__import__(inst.argval, g, None, fromlist, level))


@on("IMPORT_FROM")
def _import_from(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.stack.append(getattr(state.stack[-1], inst.argval))


@on("LOAD_ASSERTION_ERROR")
def _assertion_error(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.stack.append(AssertionError)


@on("RAISE_VARARGS")
def _raise(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    values = pop(state, arg(inst))
    if not values:
        if state.exception is None:
            raise RuntimeError("No active exception to reraise")
        raise state.exception
    if len(values) == 2:
        raise values[0] from values[1]
    raise values[0]


@on("BEFORE_WITH")
def _before_with(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    manager = state.stack.pop()
    state.stack.append(type(manager).__exit__.__get__(manager))
    state.stack.append(type(manager).__enter__(manager))


@on("RETURN_VALUE")
def _return(state: State, inst: dis.Instruction, g: dict[str, Any]) -> Returned:
    return Returned(state.stack.pop())


@on("RETURN_CONST")
def _return_const(state: State, inst: dis.Instruction, g: dict[str, Any]) -> Returned:
    return Returned(inst.argval)


# ---------------------------------------------------------------------- exception handlers
@on("PUSH_EXC_INFO")
def _push_exc_info(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    value = state.stack.pop()
    state.stack.append(state.exception)
    state.stack.append(value)
    state.exception = value


@on("POP_EXCEPT")
def _pop_except(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    state.exception = state.stack.pop()


@on("CHECK_EXC_MATCH")
def _check_exc_match(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    kind = state.stack.pop()
    state.stack.append(isinstance(state.stack[-1], kind))


@on("RERAISE")
def _reraise(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    raise state.stack.pop()


@on("WITH_EXCEPT_START")
def _with_except_start(state: State, inst: dis.Instruction, g: dict[str, Any]) -> None:
    value = state.stack[-1]
    exit_fn = state.stack[-4]
    state.stack.append(exit_fn(type(value), value, value.__traceback__))
