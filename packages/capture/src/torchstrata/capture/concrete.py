"""Running single instructions of the top-level frame for real (graph breaks).

Between captured graphs, the instruction capture could not trace runs here on real
values: a call to ``print``, a branch on a tensor, ``.item()``, an attribute store. The
frame state is a :class:`State`; :func:`step` runs one instruction and moves it on.
Only code without exception handlers reaches this (see :func:`can_resume`).
"""

from __future__ import annotations

import dis
import functools
import sys
import types
from typing import Any

from torchstrata.capture.concrete_313 import PY313_STEPS
from torchstrata.capture.concrete_data import DATA_STEPS
from torchstrata.capture.concrete_flow import FLOW_STEPS
from torchstrata.capture.concrete_state import Returned, State
from torchstrata.capture.frame import instructions_of

#: How every instruction :func:`step` runs, by ``dis`` name.
STEPS = {**DATA_STEPS, **FLOW_STEPS, **PY313_STEPS}
_PY313 = sys.version_info >= (3, 13)

#: The ``dis`` names of every instruction that can run for real after a graph break
#: (``KW_NAMES`` is handled by :func:`step` itself).
RUNNABLE_OPCODES = frozenset({*STEPS, "KW_NAMES"})


def can_resume(code: types.CodeType) -> bool:
    """Whether a call of ``code`` may be split at graph breaks: :func:`step` can run each
    of its instructions."""
    instructions, _ = instructions_of(code)
    return all(inst.opname in RUNNABLE_OPCODES for inst in instructions)


@functools.lru_cache(maxsize=256)
def _handlers(code: types.CodeType) -> tuple[Any, ...]:
    return tuple(dis.Bytecode(code).exception_entries)  # type: ignore[attr-defined]


def step(code: types.CodeType, state: State, globals_: dict[str, Any]) -> Returned | None:
    """Run the instruction at ``state.index`` for real; :class:`Returned` when it returns."""
    instructions, index_of = instructions_of(code)
    inst = instructions[state.index]
    if inst.opname == "KW_NAMES":
        state.kw_names = code.co_consts[inst.arg or 0]
        state.index += 1
        return None
    handler = STEPS.get(inst.opname)
    if handler is None:
        raise NotImplementedError(f"torchstrata capture cannot run {inst.opname} for real")
    try:
        outcome = handler(state, inst, globals_)
    except Exception as error:
        entry = next((e for e in _handlers(code) if e.start <= inst.offset < e.end), None)
        if entry is None:
            raise
        # What CPython does on an exception inside a try/with: unwind the value stack
        # to the handler's depth, push the offset (lasti) when asked, then the error.
        del state.stack[entry.depth :]
        if entry.lasti:
            state.stack.append(inst.offset)
        state.stack.append(error)
        state.index = index_of[entry.target]
        return None
    if isinstance(outcome, Returned):
        return outcome
    if isinstance(outcome, int) and not isinstance(outcome, bool):
        target = outcome
        if instructions[index_of[target]].opname == "END_FOR" and inst.opname == "FOR_ITER":
            # the iterator ended: skip END_FOR (3.12), and the POP_TOP after it (3.13)
            target = instructions[index_of[target] + (2 if _PY313 else 1)].offset
        state.index = index_of[target]
    else:
        state.index += 1
    return None
