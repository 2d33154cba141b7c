"""Opcode handlers for control flow: jumps, loops, calls, function creation, returns,
and the constructs capture does not support (CPython 3.11 and 3.12)."""

from __future__ import annotations

import dis
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from torchstrata.capture.attributes import get_attribute
from torchstrata.capture.calls import call_function
from torchstrata.capture.contexts import enter
from torchstrata.capture.generator_contexts import (
    GeneratorContextVar,
    GeneratorExitVar,
    enter_generator_context,
)
from torchstrata.capture.iteration import iterate
from torchstrata.capture.operators import identical, truth
from torchstrata.capture.tracer import Unsupported
from torchstrata.capture.user_objects import UserObjectVar
from torchstrata.capture.variables import (
    CellVar,
    ConstVar,
    ContextExitVar,
    ContextVar,
    DictVar,
    FunctionVar,
    IteratorVar,
    ObjectVar,
    SequenceVar,
    Var,
    _Null,
    describe,
    python_value,
)

if TYPE_CHECKING:  # the frame type is only needed for annotations
    from torchstrata.capture.frame import Frame


@attrs.frozen
class Jump:
    """Continue at the instruction with this offset."""

    offset: int


@attrs.frozen
class Return:
    """The frame returns this variable."""

    value: Var


@attrs.frozen
class Yield:
    """A frame that suspends at ``yield`` stops with this variable."""

    value: Var


Handler = Callable[["Frame", dis.Instruction], Any]
_PY313 = sys.version_info >= (3, 13)
FLOW_HANDLERS: dict[str, Handler] = {}


def handles(*opnames: str) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of ``opnames`` in this module's table."""

    def register(handler: Handler) -> Handler:
        for opname in opnames:
            FLOW_HANDLERS[opname] = handler
        return handler

    return register


def _arg(inst: dis.Instruction) -> int:
    """The integer argument of an instruction that has one."""
    assert inst.arg is not None, inst
    return inst.arg


# ---------------------------------------------------------------------- jumps
@handles("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT")
def _jump(frame: Frame, inst: dis.Instruction) -> Jump:
    return Jump(inst.argval)


_JUMP_IF_TRUE = {
    "POP_JUMP_IF_TRUE": True, "POP_JUMP_FORWARD_IF_TRUE": True, "POP_JUMP_BACKWARD_IF_TRUE": True,
    "POP_JUMP_IF_FALSE": False, "POP_JUMP_FORWARD_IF_FALSE": False,
    "POP_JUMP_BACKWARD_IF_FALSE": False,
}  # fmt: skip


@handles(*_JUMP_IF_TRUE)
def _pop_jump_if(frame: Frame, inst: dis.Instruction) -> Jump | None:
    if truth(frame.pop(), "branching") == _JUMP_IF_TRUE[inst.opname]:
        return Jump(inst.argval)
    return None


@handles(
    "POP_JUMP_IF_NONE",
    "POP_JUMP_FORWARD_IF_NONE",
    "POP_JUMP_BACKWARD_IF_NONE",
    "POP_JUMP_IF_NOT_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE",
    "POP_JUMP_BACKWARD_IF_NOT_NONE",
)
def _pop_jump_if_none(frame: Frame, inst: dis.Instruction) -> Jump | None:
    is_none = identical(frame.pop(), ConstVar(None))
    if is_none != ("NOT_NONE" in inst.opname):
        return Jump(inst.argval)
    return None


@handles("JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP")
def _jump_or_pop(frame: Frame, inst: dis.Instruction) -> Jump | None:
    if truth(frame.stack[-1], "branching") == (inst.opname == "JUMP_IF_TRUE_OR_POP"):  # type: ignore[arg-type]
        return Jump(inst.argval)
    frame.pop()
    return None


# ---------------------------------------------------------------------- loops
@handles("GET_ITER")
def _get_iter(frame: Frame, inst: dis.Instruction) -> None:
    value = frame.pop()
    frame.push(
        value if isinstance(value, IteratorVar) else IteratorVar(iterate(frame.tracer, value))
    )


@handles("FOR_ITER")
def _for_iter(frame: Frame, inst: dis.Instruction) -> Jump | None:
    iterator = frame.stack[-1]
    if not isinstance(iterator, IteratorVar):
        raise Unsupported(f"iteration over {describe(iterator)} is not supported")
    if iterator.position < len(iterator.items):
        iterator.position += 1
        frame.push(iterator.items[iterator.position - 1])
        return None
    frame.pop()
    # 3.12 jumps to an END_FOR (which pops two values) and CPython skips it once the
    # iterator is popped; 3.11 jumps past the loop directly.
    # 3.13's END_FOR pops one value and a POP_TOP follows it: both are skipped.
    if frame.instruction_at(inst.argval).opname == "END_FOR":
        after = frame.next_offset_after(inst.argval)
        return Jump(frame.next_offset_after(after) if _PY313 else after)
    return Jump(inst.argval)


@handles("END_FOR")
def _end_for(frame: Frame, inst: dis.Instruction) -> None:
    frame.pop_any()
    if not _PY313:
        frame.pop_any()


# ---------------------------------------------------------------------- calls
@handles("KW_NAMES")
def _kw_names(frame: Frame, inst: dis.Instruction) -> None:
    frame.kw_names = frame.code.co_consts[_arg(inst)]


@handles("CALL")
def _call(frame: Frame, inst: dis.Instruction) -> None:
    # 3.11 and 3.12: [NULL, callable, *args] or [callable, self, *args] (method form);
    # 3.13 pushes the NULL above the callable. (LOAD_GLOBAL and LOAD_ATTR here push it
    # below, whatever the version.)
    kw_names, frame.kw_names = frame.kw_names, ()
    args = frame.pop_n(_arg(inst))
    second, first = frame.pop_any(), frame.pop_any()
    if isinstance(first, _Null):
        assert not isinstance(second, _Null)
        fn = second
    elif isinstance(second, _Null):  # 3.13: [callable, NULL, *args]
        fn = first
    else:
        fn, args = first, [second, *args]
    split = len(args) - len(kw_names)
    kwargs = dict(zip(kw_names, args[split:]))
    frame.push(call_function(frame, fn, args[:split], kwargs))


@handles("CALL_FUNCTION_EX")
def _call_function_ex(frame: Frame, inst: dis.Instruction) -> None:
    kwargs_var = frame.pop() if _arg(inst) & 1 else DictVar({})
    args_var = frame.pop()
    fn = frame.pop_any()
    if isinstance(fn, _Null):  # 3.13: [callable, NULL, args]
        fn = frame.pop()
    elif frame.stack and isinstance(frame.stack[-1], _Null):
        frame.pop_any()
    if not isinstance(kwargs_var, DictVar):
        raise Unsupported(f"** with {describe(kwargs_var)} is not supported")
    args = iterate(frame.tracer, args_var)
    kwargs = {str(key): value for key, value in kwargs_var.items.items()}
    frame.push(call_function(frame, fn, args, kwargs))


@handles("MAKE_FUNCTION")
def _make_function(frame: Frame, inst: dis.Instruction) -> None:
    code = python_value(frame.pop())
    flags = inst.arg or 0  # 3.13: none (SET_FUNCTION_ATTRIBUTE sets each part)
    closure: tuple[Any, ...] = ()
    kwdefaults: dict[str, Var] = {}
    defaults: tuple[Var, ...] = ()
    if flags & 0x08:
        cells = frame.pop()
        assert isinstance(cells, SequenceVar)
        closure = tuple(item.cell for item in cells.items if isinstance(item, CellVar))
    if flags & 0x04:
        frame.pop()  # annotations
    if flags & 0x02:
        kw = frame.pop()
        assert isinstance(kw, DictVar)
        kwdefaults = {str(key): value for key, value in kw.items.items()}
    if flags & 0x01:
        defaults = tuple(iterate(frame.tracer, frame.pop()))
    frame.push(
        FunctionVar(code, frame.globals, frame.globals_source, defaults, kwdefaults, closure)
    )


# ---------------------------------------------------------------------- with
@handles("BEFORE_WITH")
def _before_with(frame: Frame, inst: dis.Instruction) -> None:
    context = frame.pop()
    if isinstance(context, GeneratorContextVar):
        frame.push(GeneratorExitVar(context))
        frame.push(enter_generator_context(frame, context))
        return
    if isinstance(context, UserObjectVar):  # a context manager class of user code
        exit_method = get_attribute(frame.tracer, context, "__exit__")
        enter_method = get_attribute(frame.tracer, context, "__enter__")
        frame.push(exit_method)
        frame.push(call_function(frame, enter_method, [], {}))
        return
    if not isinstance(context, ContextVar):
        raise Unsupported(f"with {describe(context)} is not supported")
    frame.push(ContextExitVar(context))
    frame.push(enter(frame.tracer, context))


# ---------------------------------------------------------------------- generators
# A generator called from captured code (a generator expression, mostly) is run to
# completion at once; its yields become the items of an iterator. The first resume
# and every ``send`` deliver None, which the code pops.
@handles("RETURN_GENERATOR")
def _return_generator(frame: Frame, inst: dis.Instruction) -> None:
    if not frame.is_generator:
        raise Unsupported("generators are not supported")
    frame.push(ConstVar(None))


@handles("YIELD_VALUE")
def _yield_value(frame: Frame, inst: dis.Instruction) -> None:
    if not frame.is_generator:
        raise Unsupported("generators are not supported")
    if frame.suspend_at_yield:
        return Yield(frame.pop())  # type: ignore[return-value]
    frame.yielded.append(frame.pop())
    frame.push(ConstVar(None))


# ---------------------------------------------------------------------- imports
@handles("IMPORT_NAME")
def _import_name(frame: Frame, inst: dis.Instruction) -> None:
    fromlist, level = python_value(frame.pop()), python_value(frame.pop())
    try:
        module = __import__(inst.argval, frame.globals, None, fromlist, level)
    except ImportError as error:
        failed = Unsupported(f"import raised {type(error).__name__}: {error}")
        failed.python_exception = type(error)  # ``except ImportError`` in the trace catches it
        raise failed from None
    frame.push(ObjectVar(module))


@handles("IMPORT_FROM")
def _import_from(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(get_attribute(frame.tracer, frame.stack[-1], inst.argval))  # type: ignore[arg-type]


# ---------------------------------------------------------------------- returns
@handles("RETURN_VALUE")
def _return_value(frame: Frame, inst: dis.Instruction) -> Return:
    return Return(frame.pop())


@handles("RETURN_CONST")
def _return_const(frame: Frame, inst: dis.Instruction) -> Return:
    return Return(ConstVar(inst.argval))


# ---------------------------------------------------------------------- not supported
_UNSUPPORTED = {
    "SEND": "generators and coroutines are not supported",
    "GET_AWAITABLE": "coroutines are not supported",
    "LOAD_ASSERTION_ERROR": "a failing assert (AssertionError) is not supported",
}


@handles(*_UNSUPPORTED)
def _unsupported(frame: Frame, inst: dis.Instruction) -> None:
    raise Unsupported(_UNSUPPORTED[inst.opname])
