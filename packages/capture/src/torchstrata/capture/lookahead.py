"""Finding the graph breaks after the first one at capture time, for reporting.

The program finds later breaks only when it reaches them; to report more of them in
``CaptureResult.graph_breaks`` capture looks ahead: it steps over each break (its result
becomes an :class:`~torchstrata.capture.variables.UnknownVar`, a branch on a tensor
falls through) and traces on, until the function returns, a value only known at run
time is used, or :data:`MAX_BREAKS` were found. Nothing of this is compiled.
"""

from __future__ import annotations

import dis
import sys
from typing import Any

from torchstrata.capture.frame import Frame, Paused
from torchstrata.capture.segments import Starter
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import NULL, UNKNOWN, UnknownVar, _Null
from torchstrata.core import GraphBreak

#: Most breaks reported ahead of time.
MAX_BREAKS = 8

_POPS = {
    "STORE_ATTR": (2, 0), "STORE_SUBSCR": (3, 0), "DELETE_SUBSCR": (2, 0),
    "STORE_GLOBAL": (1, 0), "DELETE_ATTR": (1, 0), "BINARY_OP": (2, 1), "COMPARE_OP": (2, 1),
    "BINARY_SUBSCR": (2, 1), "IS_OP": (2, 1), "CONTAINS_OP": (2, 1), "UNARY_NEGATIVE": (1, 1),
    "UNARY_POSITIVE": (1, 1), "UNARY_INVERT": (1, 1), "UNARY_NOT": (1, 1), "GET_ITER": (1, 1),
    "BINARY_SLICE": (3, 1), "STORE_SLICE": (4, 0), "BUILD_STRING": (-1, 1),
    "POP_JUMP_IF_TRUE": (1, 0), "POP_JUMP_IF_FALSE": (1, 0), "POP_JUMP_FORWARD_IF_TRUE": (1, 0),
    "POP_JUMP_FORWARD_IF_FALSE": (1, 0), "POP_JUMP_BACKWARD_IF_TRUE": (1, 0),
    "POP_JUMP_BACKWARD_IF_FALSE": (1, 0), "TO_BOOL": (1, 1), "CONVERT_VALUE": (1, 1),
    "FORMAT_SIMPLE": (1, 1), "FORMAT_WITH_SPEC": (2, 1),
}  # fmt: skip


class _Stop(Exception):
    """The break cannot be stepped over."""


def _step_over(frame: Frame, index: int) -> int:
    """Apply what the breaking instruction at ``index`` does to the stack, with unknown
    results; the index to continue at."""
    inst: dis.Instruction = frame.instructions[index]
    name, arg = inst.opname, inst.arg or 0
    stack = frame.stack
    if name in ("CALL", "CALL_KW"):  # CALL_KW: the names above the arguments
        del stack[len(stack) - arg - 2 - (name == "CALL_KW") :]
        frame.kw_names = ()
        stack.append(UnknownVar())
    elif name == "CALL_FUNCTION_EX":
        del stack[len(stack) - 3 - (arg & 1) :]
        if stack and isinstance(stack[-1], _Null):
            stack.pop()
        stack.append(UnknownVar())
    elif name in ("LOAD_ATTR", "LOAD_METHOD"):
        stack.pop()
        if name == "LOAD_METHOD" or (sys.version_info >= (3, 12) and arg & 1):
            stack.append(NULL)
        stack.append(UnknownVar())
    elif name == "FORMAT_VALUE":
        del stack[len(stack) - 1 - bool(arg & 0x04) :]
        stack.append(UnknownVar())
    elif name in _POPS:
        popped, pushed = _POPS[name]
        del stack[len(stack) - (arg if popped < 0 else popped) :]
        stack.extend(UnknownVar() for _ in range(pushed))
    else:
        raise _Stop(name)
    return index + 1


def find_later_breaks(
    globals_: dict[str, Any], start: Starter, first_step: int
) -> list[GraphBreak]:
    """Breaks after the one at top-level step ``first_step`` (see the module docstring)."""
    skips = [first_step]
    found: list[GraphBreak] = []
    while len(found) < MAX_BREAKS:
        tracer = Tracer(globals_)
        frame, index = start(tracer)
        done = 0
        try:
            for skip in skips:
                paused = frame.run(index, stop_step=skip - done)
                if not isinstance(paused, Paused):
                    return found
                index = _step_over(frame, paused.index)
                done = skip + 1
            frame.run(index)
            return found
        except Unsupported as error:
            if error.top_step is None or UNKNOWN in error.reason:
                return found
            filename, lineno, text = error.location or (frame.code.co_filename, 0, "")
            found.append(GraphBreak(error.reason, filename, lineno, text))
            skips.append(done + error.top_step)
        except Exception:  # noqa: BLE001 - looking ahead must never fail a capture
            return found
    return found
