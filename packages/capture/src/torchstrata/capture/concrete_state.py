"""The real frame state between captured segments, and the table of instructions that
run for real on it (kept in :mod:`.concrete_data` and :mod:`.concrete_flow`)."""

from __future__ import annotations

import dis
import types
from collections.abc import Callable
from typing import Any

import attrs


@attrs.define(eq=False)
class State:
    """A real frame state: next instruction, locals, value stack, cells, pending
    ``KW_NAMES``, the exception being handled."""

    index: int
    locals: dict[str, Any]
    stack: list[Any]
    cells: dict[str, types.CellType]
    kw_names: tuple[str, ...] = ()
    #: The exception being handled (``PUSH_EXC_INFO`` .. ``POP_EXCEPT``), for bare ``raise``.
    exception: BaseException | None = None

    def namespace(self, globals_: dict[str, Any]) -> dict[str, Any]:
        """What sources of a segment starting here are evaluated over."""
        return {"L": self.locals, "S": self.stack, "C": self.cells, "G": globals_}


@attrs.frozen
class Returned:
    """The frame returned ``value``."""

    value: Any


#: Runs one instruction: None (next one), a jump target offset, or Returned.
Step = Callable[[State, dis.Instruction, dict[str, Any]], Any]


def registrar(table: dict[str, Step]) -> Callable[..., Callable[[Step], Step]]:
    """A decorator factory registering how instructions run for real into ``table``."""

    def on(*names: str) -> Callable[[Step], Step]:
        def register(fn: Step) -> Step:
            for name in names:
                table[name] = fn
            return fn

        return register

    return on


def arg(inst: dis.Instruction) -> int:
    """The integer argument of an instruction (0 when it has none)."""
    return inst.arg or 0


def pop(state: State, count: int) -> list[Any]:
    """Pop ``count`` values off the stack, returned in push order."""
    if count == 0:
        return []
    values = state.stack[-count:]
    del state.stack[-count:]
    return values
