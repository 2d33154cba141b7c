"""The program of a capture: run the segments of a call in order.

The first segment was captured with the call's arguments and its graph is compiled by
the caller (``compiled_graphs[0]``). After each graph break the breaking instruction
runs for real (:mod:`.concrete`), and the next segment is looked up by the instruction
it starts at and its guards, or captured then from the real state. Later segments'
graphs run through the ``compile_segment`` callback the caller passed, else the
reference interpreter. Which branch a value-dependent ``if`` takes is decided on every call.

A program captured under a symbolic scope (a dynamic-shape compile, decision 0206)
traces its later segments as the runtime compiles frames with ``dynamic=None``: the
first segment at an instruction is static; when one is traced there again for a tensor
whose size changed, those dimensions are symbolic, its guards check sizes by their
relations (:func:`~torchstrata.core.size_guards`), and ``compile_segment`` gets a
graph with symbolic sizes.
"""

from __future__ import annotations

import functools
import inspect
import logging
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchstrata.capture.concrete import Returned, State, step
from torchstrata.capture.frame import Frame
from torchstrata.capture.instances import InstanceVar
from torchstrata.capture.rebuild import NullValue, ResumeIterator
from torchstrata.capture.segments import Segment, trace_segment, with_check
from torchstrata.capture.symbolic_values import has_symbolic
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import (
    NULL,
    Cell,
    ConstVar,
    DictVar,
    IteratorVar,
    ObjectVar,
    SequenceVar,
    SymbolicIntVar,
    TensorVar,
    Var,
)
from torchstrata.core import (
    GraphBreak,
    GuardKind,
    SegmentCompiler,
    SymbolicSizes,
    bind_call,
    container_ints,
    global_state,
    graph_has_symbols,
    int_negative_source,
    int_size_source,
    interpret,
    size_guards,
    symbolic_scope,
    unsupported_state,
)

logger = logging.getLogger("torchstrata.capture")

#: Most segments one program captures after graph breaks; past it, code after a break
#: runs for real instruction by instruction.
MAX_SEGMENTS = 64

#: Most segments captured at one instruction (one per value an ``.item()`` gave, say).
MAX_SEGMENTS_AT = 8


def entry_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The callable whose frame is captured: an ``nn.Module`` means its bound ``forward``."""
    if isinstance(fn, torch.nn.Module):
        return fn.forward
    return fn


@functools.lru_cache(maxsize=512)
def _signature(fn: Callable[..., Any], code: Any) -> inspect.Signature:
    """``fn``'s signature while it runs ``code`` (its ``__code__`` can be reassigned)."""
    return inspect.signature(fn)


@functools.lru_cache(maxsize=512)
def _positional_names(fn: Callable[..., Any], code: Any) -> tuple[str, ...] | None:
    """Parameter names when every parameter is plain positional-or-keyword, else None."""
    parameters = _signature(fn, code).parameters.values()
    if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters):
        return None
    return tuple(p.name for p in parameters)


def frame_locals(
    fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """``L`` for a call of ``fn``: arguments by parameter name with defaults applied, the
    bound ``self`` of a method, and the values of the function's free (closure) variables.

    Raises ``TypeError`` when the arguments do not match the signature.
    """
    fn = entry_function(fn)
    bound_self = fn.__self__ if inspect.ismethod(fn) else None
    plain = fn.__func__ if inspect.ismethod(fn) else fn
    call_args = (bound_self, *args) if bound_self is not None else tuple(args)
    code = getattr(plain, "__code__", None)
    names = _positional_names(plain, code)
    if names is not None and not kwargs and len(call_args) == len(names):
        frame = dict(zip(names, call_args))  # the common case, without Signature.bind
    else:
        frame = bind_call(_signature(plain, code), plain, call_args, kwargs)  # the defaults of now
    if bound_self is not None:
        frame.setdefault("self", bound_self)
    for name, cell in zip(
        code.co_freevars if code else (), getattr(plain, "__closure__", None) or ()
    ):
        try:
            frame.setdefault(name, cell.cell_contents)
        except ValueError:  # an empty cell: the name is not bound yet
            continue
    return frame


class CaptureProgram:
    """The :data:`~torchstrata.core.Program` of a capture (see the module docstring).

    :param fn: the captured callable (``L`` is bound for it).
    :param code: the top-level code object; ``globals_`` its globals.
    :param first: the segment captured with the call's arguments.
    :param compile_segment: compiles a later segment's graph into a callable (None: the
        reference interpreter runs it).
    :param dynamic: trace later segments with symbolic sizes where a size changes (see
        the module docstring); needs ``compile_segment`` to take symbolic graphs.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        code: Any,
        globals_: dict[str, Any],
        first: Segment,
        compile_segment: SegmentCompiler | None = None,
        dynamic: bool = False,
    ) -> None:
        self.fn = fn
        self.code = code
        self.globals = globals_
        self.first = first
        self.input_sources = first.input_sources
        #: Every graph break seen: the first segment's, then those found while running.
        self.graph_breaks: list[GraphBreak] = [first.graph_break] if first.graph_break else []
        #: Compiles a later segment's graph into a callable; None: the reference interpreter.
        self.compile_segment = compile_segment
        self.segments: dict[int, list[Segment]] = {}
        self._runners: dict[int, Callable[..., Any]] = {}
        self._failed: set[int] = set()
        self._count = 0
        self.dynamic = dynamic and compile_segment is not None
        #: (instruction, source, dim) -> the sizes segments were traced for there
        self._sizes_seen: dict[tuple[int, str, int], set[int]] = {}
        #: The sources :meth:`run_direct` takes the values of; None: it cannot run.
        self.direct_sources: tuple[str, ...] | None = None
        direct = first.paused is None and not first.side_effects
        if first.graph is not None and direct and _from_outputs(first.returned):
            self.direct_sources = first.input_sources
        #: The graph output :meth:`run_direct` returns as it is (a function returning one
        #: tensor it computed), else None (rebuilt).
        self._direct_output = first.rebuilder.output_of(first.returned)

    def __call__(
        self, compiled_graphs: Sequence[Callable[..., Any]], args: tuple[Any, ...], kwargs: Any
    ) -> Any:
        frame = frame_locals(self.fn, args, dict(kwargs))
        namespace = {"L": frame, "S": [], "C": {}, "G": self.globals}
        graph_fn = compiled_graphs[0] if self.first.graph is not None else None
        outcome = self.first.run(graph_fn, namespace)
        while not isinstance(outcome, Returned):
            outcome = self._resume(outcome)
        return outcome.value

    def run_direct(
        self, compiled_graphs: Sequence[Callable[..., Any]], inputs: tuple[Any, ...]
    ) -> Any:
        """The :data:`~torchstrata.core.DirectProgram`: what ``self(compiled_graphs, args,
        kwargs)`` returns, given the values of :attr:`direct_sources` for that call.

        Only when those are set: the first segment then returns without a graph break,
        and its return value is rebuilt from the graph's outputs and constants alone, so
        no ``L`` is needed.
        """
        outputs = compiled_graphs[0](*inputs)
        if self._direct_output is not None:
            return outputs[self._direct_output]
        first = self.first
        return first.rebuilder.build(first.returned, outputs, _NO_NAMESPACE, {})  # type: ignore[arg-type]

    def _resume(self, state: State) -> Returned | State:
        returned = step(self.code, state, self.globals)
        if returned is not None:
            return returned
        namespace = state.namespace(self.globals)
        segment = self._segment(state, namespace)
        if segment is None:
            return state
        outcome = segment.run(self._runner(segment), namespace)
        if isinstance(outcome, State):
            outcome.exception = state.exception
        return outcome

    def _segment(self, state: State, namespace: dict[str, Any]) -> Segment | None:
        for segment in self.segments.get(state.index, ()):
            assert segment.check is not None
            if segment.check(namespace["L"], namespace["S"], namespace["C"], self.globals) < 0:
                return None if segment.is_empty else segment
        crowded = len(self.segments.get(state.index, ())) >= MAX_SEGMENTS_AT
        if crowded or state.index in self._failed or self._count >= MAX_SEGMENTS:
            return None
        if unsupported_state(global_state()) is not None:
            return None  # run for real under this state (not a failure: others may trace)
        try:
            segment = with_check(self._trace(state))
        except Unsupported:
            self._failed.add(state.index)
            return None
        self._count += 1
        self.segments.setdefault(state.index, []).append(segment)
        if segment.graph_break is not None and segment.graph_break not in self.graph_breaks:
            self.graph_breaks.append(segment.graph_break)
        return None if segment.is_empty else segment

    def _trace(self, state: State) -> Segment:
        """A segment from ``state``: with the sizes that changed at its instruction
        symbolic in a dynamic program (static where the symbolic trace fails)."""
        plan = self._symbolic_dims(state) if self.dynamic else {}
        if plan:
            sizes = SymbolicSizes(plan)
            try:
                with symbolic_scope(sizes):
                    segment = trace_segment(self.globals, _starter(self.code, state), True)
            except Exception as error:  # noqa: BLE001 - symbolic tracing is optional
                logger.info("tracing a segment with symbolic sizes failed (%s); static", error)
            else:
                if segment.graph is not None and graph_has_symbols(segment.graph):
                    segment.guards = size_guards(segment.guards, sizes)
                return segment
        with symbolic_scope(None):
            return trace_segment(self.globals, _starter(self.code, state), True)

    def _symbolic_dims(self, state: State) -> dict[str, tuple[int, ...]]:
        """Source -> dims of the tensors in ``state`` whose size differs from the one an
        earlier segment at this instruction was traced for (sizes 0 and 1 stay static),
        ints as their size carriers; the sizes are remembered."""
        values = [(f"L[{name!r}]", value) for name, value in state.locals.items()]
        values += [(f"S[{index}]", value) for index, value in enumerate(state.stack)]
        # the ints inside tuples, lists and dicts of the state too (decision 0365)
        values += [item for source, value in values for item in container_ints(source, value)]
        plan: dict[str, tuple[int, ...]] = {}
        for source, value in values:
            if type(value) is int:  # as its size carrier (decisions 0330, 0385)
                carrier = int_negative_source if value < 0 else int_size_source
                source, shape = carrier(source), (abs(value),)
            elif type(value) in (torch.Tensor, torch.nn.Parameter):
                shape = value.shape
            else:
                continue
            dims = []
            for dim, size in enumerate(shape):
                seen = self._sizes_seen.setdefault((state.index, source, dim), set())
                if size >= 2 and any(old != size for old in seen):
                    dims.append(dim)
                seen.add(size)
            if dims:
                plan[source] = tuple(dims)
        return plan

    def _runner(self, segment: Segment) -> Callable[..., Any] | None:
        graph = segment.graph
        if graph is None:
            return None
        if id(segment) not in self._runners:
            runner: Callable[..., Any] = functools.partial(interpret, graph)
            if self.compile_segment is not None:
                try:
                    runner = self.compile_segment(graph)
                except Exception:
                    logger.warning("compiling a segment after a graph break failed", exc_info=True)
            self._runners[id(segment)] = runner
        return self._runners[id(segment)]


#: The namespace :meth:`CaptureProgram.run_direct` rebuilds in: it reads no source.
_NO_NAMESPACE: dict[str, Any] = {}


def _from_outputs(var: Var | None) -> bool:
    """Whether rebuilding ``var`` reads graph outputs and constants only (no source of
    ``L`` or ``G``, no cells): tensors computed by the graph, constants, and tuples,
    lists, dicts and dataclass instances of those."""
    if isinstance(var, SymbolicIntVar):  # read again from its source (decision 0330)
        return False
    if isinstance(var, ConstVar):  # one still symbolic is computed from sources (0386)
        return not has_symbolic(var.value)
    if isinstance(var, TensorVar | SequenceVar | DictVar) and var.source is not None:
        return False
    if isinstance(var, TensorVar):
        return True
    if isinstance(var, SequenceVar):
        return all(_from_outputs(item) for item in var.items)
    if isinstance(var, DictVar):
        return all(_from_outputs(item) for item in var.items.values())
    if isinstance(var, InstanceVar):
        return all(_from_outputs(item) for item in var.fields.values())
    return False


def _starter(code: Any, state: State) -> Callable[[Tracer], tuple[Frame, int]]:
    """Sets up a frame over the real ``state`` (sources ``L[...]``, ``S[i]``, ``C[...]``)."""

    def start(tracer: Tracer) -> tuple[Frame, int]:
        bound = {name: tracer.wrap(value, f"L[{name!r}]") for name, value in state.locals.items()}
        frame = Frame(tracer, code, tracer.globals, "G", bound, ())  # type: ignore[arg-type]
        frame.cells = {name: _cell(name, cell) for name, cell in state.cells.items()}
        frame.stack = [wrap_stack(tracer, value, index) for index, value in enumerate(state.stack)]
        frame.kw_names = state.kw_names
        return frame, state.index

    return start


def _cell(name: str, cell: Any) -> Cell:
    def origin(namespace: dict[str, Any]) -> Any:
        return namespace["C"][name]

    try:
        contents = cell.cell_contents
    except ValueError:
        return Cell(origin=origin)
    return Cell(pending=(contents, f"C[{name!r}].cell_contents", True), origin=origin)


def wrap_stack(tracer: Tracer, value: Any, index: int) -> Var | Any:
    """A variable for a real value on the value stack (NULL, iterators, the rest)."""
    source = f"S[{index}]"
    if isinstance(value, NullValue):
        return NULL
    if isinstance(value, ResumeIterator):
        rest = value.rest()
        tracer.guard(GuardKind.TYPE_MATCH, source, ResumeIterator)
        tracer.guard(GuardKind.CONSTANT_MATCH, f"len({source}.rest())", len(rest))
        return IteratorVar(
            [tracer.wrap(item, f"{source}.rest()[{i}]") for i, item in enumerate(rest)]
        )
    per_call = isinstance(value, BaseException) or hasattr(type(value), "__next__")
    if isinstance(value, types.MethodType) and value.__name__ == "__exit__":
        per_call = True
    if per_call:  # made anew on every call (an exception, a generator, a with's exit)
        tracer.guard(GuardKind.TYPE_MATCH, source, type(value))
        return ObjectVar(value, source)
    return tracer.wrap(value, source)
