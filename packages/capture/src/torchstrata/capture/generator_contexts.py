"""``@contextlib.contextmanager`` context managers, traced.

Calling such a function makes a ``contextlib._GeneratorContextManager`` over the
generator function; capture makes a :class:`GeneratorContextVar` instead. ``with`` on it
starts the generator function in a frame of its own and interprets it up to its first
``yield`` (what ``__enter__`` returns is the yielded value), leaving that frame
suspended; leaving the block normally resumes it to its end, as ``__exit__`` does.
Leaving the block by an exception (which ``__exit__`` would throw into the generator)
is not traced: a graph break.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from torchstrata.capture.tracer import Unsupported
from torchstrata.capture.variables import ConstVar, DictVar, SequenceVar, Var

if TYPE_CHECKING:  # the frame type is only needed for annotations
    from torchstrata.capture.frame import Frame


@attrs.define(eq=False)
class GeneratorContextVar(Var):
    """``contextmanager_function(*args, **kwargs)`` before ``with`` enters it."""

    function: Var
    args: list[Var]
    kwargs: dict[str, Var]
    frame: Any = None
    resume_at: int | None = None


@attrs.define(eq=False)
class GeneratorExitVar(Var):
    """The ``__exit__`` of an entered :class:`GeneratorContextVar`."""

    context: GeneratorContextVar


class _Starter:
    """Stands for the calling frame: its ``inline`` makes the called function's frame
    and returns it unstarted (the generator function's arguments are bound as for any
    inlined call, its guards recorded the same way)."""

    def __init__(self, frame: Frame) -> None:
        self._frame = frame
        self.tracer = frame.tracer
        self.code = frame.code
        self.locals = frame.locals
        self.cells = frame.cells

    def read_cell(self, name: str) -> Var:
        return self._frame.read_cell(name)

    def inline(
        self,
        code: types.CodeType,
        globals_: dict[str, Any],
        globals_source: str | None,
        bound: dict[str, Var],
        closure: Sequence[Any],
    ) -> Any:
        from torchstrata.capture.frame import Frame

        depth = self._frame.depth + 1
        return Frame(self.tracer, code, globals_, globals_source, bound, closure, depth)


def enter_generator_context(frame: Frame, context: GeneratorContextVar) -> Var:
    """Run the generator function to its first ``yield``; returns the yielded value."""
    from torchstrata.capture.calls import call_function
    from torchstrata.capture.frame import Suspended

    if context.frame is not None:
        raise Unsupported("entering a contextmanager object twice")
    child: Any = call_function(_Starter(frame), context.function, context.args, context.kwargs)
    if not getattr(child, "is_generator", False):
        raise Unsupported("a contextmanager function that is not a generator function")
    outcome = child.resume(0)
    if not isinstance(outcome, Suspended):
        raise Unsupported("a contextmanager generator that did not yield")
    context.frame, context.resume_at = child, outcome.index
    return outcome.value


def exit_generator_context(exit_var: GeneratorExitVar, args: Sequence[Var]) -> Var:
    """Resume the suspended generator to its end (the block left normally)."""
    from torchstrata.capture.frame import Suspended

    context = exit_var.context
    if any(not (isinstance(arg, ConstVar) and arg.value is None) for arg in args):
        raise Unsupported("an exception leaving a contextmanager block is not supported")
    if context.frame is None or context.resume_at is None:
        raise Unsupported("leaving a contextmanager block that was not entered")
    child = context.frame
    child.push(ConstVar(None))  # what the suspended ``yield`` evaluates to
    outcome = child.resume(context.resume_at)
    if isinstance(outcome, Suspended):
        raise Unsupported("a contextmanager generator that yielded twice")
    return ConstVar(False)


def make_generator_context(args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    """``_GeneratorContextManager(func, args, kwds)`` as contextlib's wrapper calls it."""
    call_args, call_kwargs = (args[1], args[2]) if len(args) == 3 else (None, None)
    if kwargs or not isinstance(call_args, SequenceVar) or not isinstance(call_kwargs, DictVar):
        raise Unsupported("contextlib._GeneratorContextManager called with unknown arguments")
    keywords = {str(key): value for key, value in call_kwargs.items.items()}
    return GeneratorContextVar(args[0], list(call_args.items), keywords)
