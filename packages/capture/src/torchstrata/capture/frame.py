"""The bytecode interpreter: one :class:`Frame` per function being captured or inlined.

A frame walks its code object's instructions (``dis.get_instructions``) with a value
stack of symbolic variables. Opcode handlers live in :mod:`.opcodes_data` and
:mod:`.opcodes_flow` (and :mod:`.opcodes_313`); they cover the CPython 3.11, 3.12 and
3.13 instruction sets.
"""

from __future__ import annotations

import dis
import functools
import inspect
import types
from collections.abc import Sequence
from typing import Any

import attrs

from torchstrata.capture.exceptions import (
    EXCEPTION_HANDLERS,
    TracedRaise,
    enter_handler,
    handler_entry,
    user_exception,
)
from torchstrata.capture.opcodes_313 import PY313_HANDLERS
from torchstrata.capture.opcodes_data import DATA_HANDLERS
from torchstrata.capture.opcodes_flow import FLOW_HANDLERS, Jump, Return, Yield
from torchstrata.capture.tracer import MAX_INSTRUCTIONS, Tracer, Unsupported
from torchstrata.capture.variables import Cell, IteratorVar, NotConstant, Var, _Null, describe

#: Every opcode capture interprets, by ``dis`` name.
HANDLERS = {**DATA_HANDLERS, **FLOW_HANDLERS, **PY313_HANDLERS, **EXCEPTION_HANDLERS}

#: The ``dis`` names of every instruction capture interprets (some raise a graph break
#: that names the construct: generators, ``with``, ``raise``...).
SUPPORTED_OPCODES = frozenset(HANDLERS)


@functools.lru_cache(maxsize=1024)
def instructions_of(code: types.CodeType) -> tuple[list[dis.Instruction], dict[int, int]]:
    """The instructions of ``code`` and the index of each offset."""
    instructions = list(dis.get_instructions(code))
    return instructions, {inst.offset: index for index, inst in enumerate(instructions)}


#: How deep calls may be inlined before capture gives up (recursion).
MAX_INLINE_DEPTH = 48


@attrs.frozen
class Suspended:
    """A generator frame stopped at a ``yield`` of ``value``; it goes on at ``index``."""

    value: Var
    index: int


@attrs.frozen
class Paused:
    """A top-level frame stopped before the instruction at ``index`` (a graph break)."""

    index: int


class Frame:
    """Interprets one code object.

    :param tracer: the capture's shared state (graph, inputs, guards).
    :param code: the code object to run.
    :param globals_: its globals; ``globals_source`` names them in guards (``"G"``) or is
        None when they are not the user function's globals (values are then not guarded).
    :param bound: the arguments, by parameter name.
    :param closure: the cells of its free variables, in ``co_freevars`` order.
    """

    def __init__(
        self,
        tracer: Tracer,
        code: types.CodeType,
        globals_: dict[str, Any],
        globals_source: str | None,
        bound: dict[str, Var],
        closure: Sequence[Cell],
        depth: int = 0,
    ) -> None:
        self.tracer = tracer
        self.code = code
        self.globals = globals_
        self.globals_source = globals_source
        self.locals: dict[str, Var] = dict(bound)
        self.cells: dict[str, Cell] = dict(zip(code.co_freevars, closure))
        self.stack: list[Var | _Null] = []
        self.kw_names: tuple[str, ...] = ()
        self.depth = depth
        self.instructions, self._index_of = instructions_of(code)
        self.lineno = code.co_firstlineno
        # A generator's frame runs to completion at once, collecting what it yields.
        self.is_generator = bool(code.co_flags & inspect.CO_GENERATOR)
        self.yielded: list[Var] = []
        #: Stop at each ``yield`` (a contextmanager's generator) instead of collecting.
        self.suspend_at_yield = False
        #: Exceptions being handled (``except`` blocks entered), innermost last.
        self.handling: list[Any] = []

    # ------------------------------------------------------------------ stack
    def push(self, value: Var | _Null) -> None:
        """Push onto the value stack."""
        self.stack.append(value)

    def pop(self) -> Var:
        """Pop a variable (never NULL) off the value stack."""
        value = self.stack.pop()
        assert not isinstance(value, _Null), "popped NULL where a value was expected"
        return value

    def pop_any(self) -> Var | _Null:
        """Pop a variable or NULL."""
        return self.stack.pop()

    def pop_n(self, count: int) -> list[Var]:
        """Pop ``count`` variables, returned in push order."""
        if count == 0:
            return []
        values = self.stack[-count:]
        del self.stack[-count:]
        assert not any(isinstance(value, _Null) for value in values)
        return values  # type: ignore[return-value]

    def read_cell(self, name: str) -> Var:
        """The value of cell or free variable ``name`` (real values are wrapped on first read)."""
        cell = self.cells.get(name)
        if cell is not None and cell.var is None and cell.pending is not None:
            value, source, guard = cell.pending
            cell.var, cell.pending = self.tracer.wrap(value, source, guard=guard), None
        if cell is None or cell.var is None:
            raise Unsupported(f"free variable {name!r} referenced before assignment")
        return cell.var

    # ------------------------------------------------------------------ running
    def run(self, start_index: int = 0, stop_step: int | None = None) -> Var | Paused:
        """Interpret the code from instruction ``start_index`` to its ``return`` and give
        back the returned variable; or stop before running the ``stop_step``-th
        instruction (counted from 0) and return :class:`Paused`. (A frame that suspends
        at ``yield`` returns :class:`Suspended` there: see :meth:`resume`.)"""
        index = start_index
        steps = 0
        while True:
            if steps == stop_step:
                return Paused(index)
            steps += 1
            inst = self.instructions[index]
            self.tracer.instructions_run += 1
            if inst.positions is not None and inst.positions.lineno is not None:
                self.lineno = inst.positions.lineno
            raised: TracedRaise | None = None
            try:
                if self.tracer.instructions_run > MAX_INSTRUCTIONS:
                    raise Unsupported(
                        f"capture stopped after {MAX_INSTRUCTIONS} instructions (a runaway loop?)"
                    )
                handler = HANDLERS.get(inst.opname)
                if handler is None:
                    raise Unsupported(f"bytecode instruction {inst.opname} is not supported")
                try:
                    outcome = handler(self, inst)
                except TracedRaise as error:
                    raised = error
                    outcome = None
                except Unsupported as error:
                    python_exception = error.python_exception  # catchable in this frame?
                    if python_exception is None or handler_entry(self.code, inst.offset) is None:
                        raise
                    raised = TracedRaise(user_exception(python_exception, error.reason))
                    outcome = None
                except NotConstant as error:
                    value = error.args[0] if error.args else None
                    what = describe(value) if isinstance(value, Var | _Null) else "a value"
                    raise Unsupported(f"{inst.opname} needs a constant, got {what}") from None
            except Unsupported as error:
                if error.location is None:
                    text = f"{inst.opname} {inst.argrepr}".strip()
                    error.location = (self.code.co_filename, self.lineno, text)
                if self.depth == 0:
                    error.top_step, error.top_index = steps - 1, index
                raise
            if raised is not None:
                index = self._unwind(raised, inst, index, steps)
            elif outcome is None:
                index += 1
            elif isinstance(outcome, Yield):
                return Suspended(outcome.value, index + 1)  # type: ignore[return-value]
            elif isinstance(outcome, Jump):
                index = self._index_of[outcome.offset]
            else:
                assert isinstance(outcome, Return)
                return IteratorVar(self.yielded) if self.is_generator else outcome.value

    def _unwind(self, raised: TracedRaise, inst: dis.Instruction, index: int, steps: int) -> int:
        """Where a handler of this frame catches ``raised`` (the index to go on at);
        raise it into the caller when none does (at the top level: a graph break)."""
        entry = handler_entry(self.code, inst.offset)
        if entry is not None:
            return self._index_of[enter_handler(self, entry, inst.offset, raised.exception)]
        if self.depth > 0:
            raise raised
        name = type(raised.exception.value).__name__
        error = Unsupported(f"{name} raised and not caught in the traced code")
        error.location = (self.code.co_filename, self.lineno, f"{inst.opname} {inst.argrepr}")
        error.top_step, error.top_index = steps - 1, index
        raise error

    def resume(self, index: int) -> Var | Suspended:
        """Run a frame that suspends at ``yield`` from ``index`` to its next ``yield``
        (:class:`Suspended`) or its return (the returned variable)."""
        self.suspend_at_yield = True
        result = self.run(index)
        assert not isinstance(result, Paused)
        return result

    def inline(
        self,
        code: types.CodeType,
        globals_: dict[str, Any],
        globals_source: str | None,
        bound: dict[str, Var],
        closure: Sequence[Cell],
    ) -> Var:
        """Interpret a called function in a nested frame and return its result."""
        if self.depth >= MAX_INLINE_DEPTH:
            raise Unsupported(f"calls nested deeper than {MAX_INLINE_DEPTH} (recursion?)")
        child = Frame(self.tracer, code, globals_, globals_source, bound, closure, self.depth + 1)
        result = child.run()
        assert not isinstance(result, Paused | Suspended), "only the top-level frame pauses"
        return result

    def index_of(self, offset: int) -> int:
        """The index in :attr:`instructions` of the instruction at ``offset``."""
        return self._index_of[offset]

    def next_offset_after(self, offset: int) -> int:
        """The offset of the instruction after the one at ``offset``."""
        return self.instructions[self._index_of[offset] + 1].offset

    def instruction_at(self, offset: int) -> dis.Instruction:
        """The instruction at ``offset``."""
        return self.instructions[self._index_of[offset]]
