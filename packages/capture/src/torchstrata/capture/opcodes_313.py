"""Opcode handlers for the instructions CPython 3.13 added: the fused local loads and
stores, ``CALL_KW``, ``TO_BOOL``, ``SET_FUNCTION_ATTRIBUTE`` and the split f-string
formatting (``CONVERT_VALUE``, ``FORMAT_SIMPLE``, ``FORMAT_WITH_SPEC``).

They are plain Python over the frame's stack, so they are registered (and unit-tested)
under every interpreter; only 3.13 emits them. The 3.13 changes to existing
instructions live with those: ``CALL``/``CALL_FUNCTION_EX`` accept the callable above or
below its NULL, ``FOR_ITER`` skips ``END_FOR`` and ``POP_TOP`` when the iterator ends,
``MAKE_FUNCTION`` has no flags.
"""

from __future__ import annotations

import dis
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torchstrata.capture.iteration import iterate
from torchstrata.capture.opcodes_data import load_fast
from torchstrata.capture.opcodes_flow import FLOW_HANDLERS
from torchstrata.capture.operators import truth
from torchstrata.capture.tracer import Unsupported
from torchstrata.capture.variables import (
    CellVar,
    ConstVar,
    DictVar,
    FunctionVar,
    SequenceVar,
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
PY313_HANDLERS: dict[str, Handler] = {}

#: ``CONVERT_VALUE``'s argument: the conversion of ``!s``, ``!r``, ``!a``.
CONVERSIONS: dict[int, Callable[[Any], str]] = {1: str, 2: repr, 3: ascii}


def handles(*opnames: str) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of ``opnames`` in this module's table."""

    def register(handler: Handler) -> Handler:
        for opname in opnames:
            PY313_HANDLERS[opname] = handler
        return handler

    return register


def _names(inst: dis.Instruction) -> tuple[str, str]:
    """The two local names of a fused instruction (``dis`` gives them as ``argval``)."""
    first, second = inst.argval
    return first, second


def store_local(frame: Frame, name: str) -> None:
    """``STORE_FAST name`` (a NULL restores a name ``LOAD_FAST_AND_CLEAR`` cleared)."""
    value = frame.pop_any()
    if isinstance(value, _Null):
        frame.locals.pop(name, None)
    else:
        frame.locals[name] = value


@handles("LOAD_FAST_LOAD_FAST")
def _load_fast_load_fast(frame: Frame, inst: dis.Instruction) -> None:
    for name in _names(inst):
        load_fast(frame, name)


@handles("STORE_FAST_LOAD_FAST")
def _store_fast_load_fast(frame: Frame, inst: dis.Instruction) -> None:
    stored, loaded = _names(inst)
    store_local(frame, stored)
    load_fast(frame, loaded)


@handles("STORE_FAST_STORE_FAST")
def _store_fast_store_fast(frame: Frame, inst: dis.Instruction) -> None:
    # the first name takes the top of the stack, the second the value below it
    for name in _names(inst):
        store_local(frame, name)


@handles("CALL_KW")
def _call_kw(frame: Frame, inst: dis.Instruction) -> None:
    # [callable, self or NULL, *args, names]: CALL with the names KW_NAMES gave before
    frame.kw_names = tuple(python_value(frame.pop()))
    FLOW_HANDLERS["CALL"](frame, inst)


@handles("TO_BOOL")
def _to_bool(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(ConstVar(truth(frame.pop(), "branching")))


@handles("SET_FUNCTION_ATTRIBUTE")
def _set_function_attribute(frame: Frame, inst: dis.Instruction) -> None:
    function, value = frame.pop(), frame.pop()
    if not isinstance(function, FunctionVar):
        raise Unsupported(f"SET_FUNCTION_ATTRIBUTE on {describe(function)}")
    flag = inst.arg or 0
    if flag == 0x08:
        assert isinstance(value, SequenceVar)
        function.closure = tuple(item.cell for item in value.items if isinstance(item, CellVar))
    elif flag == 0x02:
        assert isinstance(value, DictVar)
        function.kwdefaults = {str(key): item for key, item in value.items.items()}
    elif flag == 0x01:
        function.defaults = tuple(iterate(frame.tracer, value))
    # 0x04: annotations, which capture does not use
    frame.push(function)


def _constant_to_format(value: Var) -> Any:
    if isinstance(value, TensorVar):
        raise Unsupported("formatting a tensor into a string depends on its values")
    return specialise_sizes(python_value(value))  # a symbolic size prints its value


@handles("CONVERT_VALUE")
def _convert_value(frame: Frame, inst: dis.Instruction) -> None:
    convert = CONVERSIONS[inst.arg or 0]
    frame.push(ConstVar(convert(_constant_to_format(frame.pop()))))


@handles("FORMAT_SIMPLE")
def _format_simple(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(ConstVar(format(_constant_to_format(frame.pop()))))


@handles("FORMAT_WITH_SPEC")
def _format_with_spec(frame: Frame, inst: dis.Instruction) -> None:
    spec = python_value(frame.pop())
    frame.push(ConstVar(format(_constant_to_format(frame.pop()), spec)))
