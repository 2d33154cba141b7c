"""Exceptions raised and caught inside traced code.

``raise`` in a traced function raises :class:`TracedRaise` in the capture, carrying the
exception as a variable (an exception object built from constants at capture time, as
:func:`make_exception` does for ``ValueError("...")``). The frame that runs the raising
instruction looks the instruction up in its code's exception table (CPython 3.11+):
a handler there gets the stack cut to its depth, the exception pushed and the jump, as
CPython does; with none, the exception leaves the frame into its caller's ``CALL``, and
so on up. One that leaves the top-level frame is a graph break: that instruction runs
for real, where eager raises it.

Reading a missing attribute (``AttributeError``) and a missing dict key (``KeyError``)
inside a ``try`` become such raises too, so ``try: ... except AttributeError:`` fallbacks
trace. The handler opcodes (``PUSH_EXC_INFO``, ``CHECK_EXC_MATCH``, ``POP_EXCEPT``,
``RERAISE``, ``WITH_EXCEPT_START``) are here.
"""

from __future__ import annotations

import dis
import functools
import types
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from torchstrata.capture.tracer import Unsupported
from torchstrata.capture.variables import (
    ConstVar,
    NotConstant,
    ObjectVar,
    SequenceVar,
    Var,
    describe,
    python_value,
)

if TYPE_CHECKING:  # the frame type is only needed for annotations
    from torchstrata.capture.frame import Frame

Handler = Callable[["Frame", dis.Instruction], Any]
EXCEPTION_HANDLERS: dict[str, Handler] = {}


class TracedRaise(BaseException):
    """An exception raised by traced code, on its way to a handler of the trace.

    A ``BaseException``: the capture's own ``except Exception`` clauses (around real
    calls) must not swallow it; the frames' interpreter loops catch it.
    """

    def __init__(self, exception: ObjectVar) -> None:
        super().__init__(describe(exception))
        self.exception = exception


def handles(*opnames: str) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of ``opnames``."""

    def register(handler: Handler) -> Handler:
        for opname in opnames:
            EXCEPTION_HANDLERS[opname] = handler
        return handler

    return register


def make_exception(cls: type[BaseException], args: Sequence[Var]) -> ObjectVar:
    """``cls(*args)`` for an exception class and constant arguments, built now."""
    try:
        values = [python_value(arg) for arg in args]
    except NotConstant:
        raise Unsupported(f"{cls.__name__}(...) with non-constant arguments") from None
    try:
        exception = cls(*values)
    except Exception as error:  # noqa: BLE001 - the user's exception: let eager raise it
        raise Unsupported(f"{cls.__name__}(...) raised {type(error).__name__}") from None
    return ObjectVar(exception)


def user_exception(cls: type[BaseException], message: str) -> ObjectVar:
    """``cls(message)`` (a missing attribute, a missing key), as a variable."""
    return ObjectVar(cls(message))


@functools.lru_cache(maxsize=1024)
def _entries(code: types.CodeType) -> tuple[Any, ...]:
    return tuple(dis.Bytecode(code).exception_entries)  # type: ignore[attr-defined]


def handler_entry(code: types.CodeType, offset: int) -> Any | None:
    """The exception-table entry covering the instruction at ``offset``, or None."""
    for entry in _entries(code):
        if entry.start <= offset < entry.end:
            return entry
    return None


def enter_handler(frame: Frame, entry: Any, offset: int, exception: ObjectVar) -> int:
    """Unwind ``frame``'s stack for ``entry`` and push what its handler expects; returns
    the handler's offset."""
    del frame.stack[entry.depth :]
    if entry.lasti:
        frame.push(ConstVar(offset))
    frame.push(exception)
    return int(entry.target)


def _raised(var: Var) -> ObjectVar:
    """The exception ``raise var`` raises (a class is instantiated with no arguments)."""
    if isinstance(var, ObjectVar):
        value = var.value
        if isinstance(value, type) and issubclass(value, BaseException):
            return make_exception(value, ())
        if isinstance(value, BaseException):
            return var
    raise Unsupported(f"raising {describe(var)} is not supported")


@handles("RAISE_VARARGS")
def _raise_varargs(frame: Frame, inst: dis.Instruction) -> None:
    count = inst.arg or 0
    if count == 0:
        if not frame.handling:
            raise Unsupported("a bare raise with no exception being handled")
        raise TracedRaise(frame.handling[-1])
    cause = frame.pop() if count == 2 else None
    exception = _raised(frame.pop())
    if cause is not None:
        is_none = isinstance(cause, ConstVar) and cause.value is None
        exception.value.__cause__ = None if is_none else _raised(cause).value
        exception.value.__suppress_context__ = True
    raise TracedRaise(exception)


@handles("RERAISE")
def _reraise(frame: Frame, inst: dis.Instruction) -> None:
    exception = frame.pop()
    if inst.arg:
        frame.pop()  # the saved f_lasti
    if not isinstance(exception, ObjectVar):
        raise Unsupported(f"re-raising {describe(exception)} is not supported")
    raise TracedRaise(exception)


@handles("PUSH_EXC_INFO")
def _push_exc_info(frame: Frame, inst: dis.Instruction) -> None:
    exception = frame.pop()
    previous = frame.handling[-1] if frame.handling else ConstVar(None)
    frame.push(previous)
    frame.push(exception)
    if not isinstance(exception, ObjectVar):
        raise Unsupported(f"handling {describe(exception)} as an exception")
    frame.handling.append(exception)


@handles("POP_EXCEPT")
def _pop_except(frame: Frame, inst: dis.Instruction) -> None:
    frame.pop()  # the exception that was being handled before
    if frame.handling:
        frame.handling.pop()


@handles("CHECK_EXC_MATCH")
def _check_exc_match(frame: Frame, inst: dis.Instruction) -> None:
    classes = frame.pop()
    exception = frame.stack[-1]
    if isinstance(classes, SequenceVar):
        wanted = tuple(python_value(item) for item in classes.items)
    else:
        wanted = python_value(classes)
    if not isinstance(exception, ObjectVar):
        raise Unsupported(f"matching {describe(exception)} against exception classes")
    frame.push(ConstVar(isinstance(exception.value, wanted)))


@handles("WITH_EXCEPT_START")
def _with_except_start(frame: Frame, inst: dis.Instruction) -> None:
    from torchstrata.capture.calls import call_function  # calls imports the frame's modules

    exception = frame.stack[-1]
    exit_function = frame.stack[-4]
    if not isinstance(exception, ObjectVar) or not isinstance(exit_function, Var):
        raise Unsupported("leaving a with block by an exception, in this form")
    args = [ObjectVar(type(exception.value)), exception, ConstVar(None)]
    frame.push(call_function(frame, exit_function, args, {}))
