"""The objects that stages hand to each other (all frozen attrs classes)."""

from __future__ import annotations

import enum
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import torch

from torchstrata.core.graph import Graph
from torchstrata.core.meta import TensorMeta

#: The tensor types a trace takes as graph inputs, and a ``TENSOR_MATCH`` guard accepts
#: exactly: a subclass (its ``__torch_function__`` or dispatch) would run a graph traced
#: for a plain tensor.
TENSOR_TYPES = frozenset({torch.Tensor, torch.nn.Parameter, torch.nn.Buffer})


class GuardKind(enum.Enum):
    """What a guard compares."""

    TENSOR_MATCH = "tensor_match"  # type (TENSOR_TYPES), shape, strides, dtype, device, grad
    CONSTANT_MATCH = "constant_match"  # a Python value equal to the one traced
    ID_MATCH = "id_match"  # the very same object (functions, modules, globals)
    TYPE_MATCH = "type_match"  # an object of the same type
    ABSENT_KEY = "absent_key"  # ``expected`` is not a key of the source (a module's __dict__)
    GLOBAL_STATE = "global_state"  # the global torch state snapshot (core.guard_state)


@attrs.frozen
class Guard:
    """One assumption of a trace, re-checked before its compiled code runs.

    ``source`` is a Python expression over ``L`` (the frame's arguments by parameter
    name) and ``G`` (the function's globals), e.g. ``L['x']`` or ``G['torch'].nn``, and
    over the names of ``cells``.
    ``expected`` is a :class:`~torchstrata.core.TensorMeta` for tensor guards, the
    value for constant guards, an ``id()`` for identity guards, a type for type guards,
    the key for absent-key guards.

    ``referent`` is the object an identity guard identifies (its ``id()`` is
    ``expected``), held by the guard: while the guard lives no other object can take
    that address and pass it, and a check may compare with ``is``. None: not held (the
    check compares ``id()``s). It takes no part in equality or hashing.

    ``cells`` holds the closure cells that ``source`` names, by name
    (``__cell_scale_7f3a__.cell_contents``): cells no expression over ``L`` or ``G``
    reaches, such as those of a closure inlined from a value the trace computed. The
    guard holds them, so they live as long as the guard and nothing else; whoever
    evaluates ``source`` binds these names (:func:`guard_cells`). No part in equality or
    hashing.
    """

    kind: GuardKind
    source: str
    expected: Any
    description: str = ""
    referent: Any = attrs.field(default=None, eq=False, repr=False)
    cells: tuple[tuple[str, types.CellType], ...] = attrs.field(default=(), eq=False, repr=False)


def guard_cells(guards: Iterable[Guard]) -> dict[str, types.CellType]:
    """The names the sources of ``guards`` read besides ``L`` and ``G``, bound to the
    cells the guards hold (for the namespace a check of those sources runs in)."""
    return {name: cell for guard in guards for name, cell in guard.cells}


@attrs.frozen
class GraphBreak:
    """A place where capture stopped: why, and where in the user's source."""

    reason: str
    filename: str
    lineno: int
    instruction: str = ""

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}: {self.reason}"


#: ``program(compiled_graphs, args, kwargs)`` runs the captured frame: it fetches each
#: graph's inputs, calls the compiled graphs, runs any eager pieces between them and
#: returns what the original function returns.
Program = Callable[[Sequence[Callable[..., Any]], tuple[Any, ...], dict[str, Any]], Any]

#: ``direct(compiled_graphs, inputs)`` runs the captured frame for a caller that has
#: already read the first graph's inputs: ``inputs`` are the values of the capture's
#: ``direct_sources``, read after every guard held. It returns what ``program`` returns
#: for the same call (a caller whose guard check read those sources passes their values
#: on, instead of the program binding the arguments and reading them again).
DirectProgram = Callable[[Sequence[Callable[..., Any]], tuple[Any, ...]], Any]


@attrs.frozen
class CaptureResult:
    """What capture found in one call of a function.

    ``graphs`` are torch-level graphs; ``program`` stitches their compiled forms back
    into the function's behaviour. With no graphs and no program the function is
    to run eagerly (``graph_breaks`` say why).

    ``direct_program`` (with ``direct_sources``, expressions over ``L`` and ``G`` like
    guard sources) is an optional shortcut of ``program``; None when the frame needs more
    than its first graph's inputs (a graph break, a return value that re-reads ``L``).
    """

    graphs: tuple[Graph, ...]
    guards: tuple[Guard, ...]
    graph_breaks: tuple[GraphBreak, ...] = ()
    program: Program | None = None
    direct_sources: tuple[str, ...] | None = None
    direct_program: DirectProgram | None = None


@attrs.frozen
class AotResult:
    """Functional ATen graphs made from one torch-level graph.

    ``forward`` takes the torch graph's inputs and returns the user's outputs first, then
    ``num_mutations`` values to copy into the inputs listed in ``mutated_inputs``, then
    ``num_saved`` tensors kept for ``backward``, then ``num_unit_grads`` more: when the
    graph's one tangent is a scalar, the gradients ``backward`` would return for a tangent
    of 1 (one per ``grad_inputs`` entry; 0 when the forward does not compute them). A
    caller may return those, scaled by the tangent, instead of running ``backward``.
    ``backward`` is None for inference.

    ``backward`` takes the ``num_saved`` saved tensors, then one tangent (the incoming
    gradient, contiguous) for each forward output listed in ``tangent_outputs`` (user
    outputs and write-backs, indexed together: a write-back whose new value requires
    grad gets one, decision 0520), and
    returns one gradient for each input listed in ``grad_inputs`` (the other inputs get
    no gradient).

    ``output_aliases`` has one entry per user output: None, or ``(input index, size,
    stride, storage_offset)`` when the output is a view of (or is) that input. The
    offset is relative to the input's own first element (inputs are traced from their
    metadata, which has no storage offset): the caller returns
    ``inputs[index].as_strided(size, stride, inputs[index].storage_offset() + offset)``
    (after the write-backs) instead of the computed value.

    ``output_views`` has one entry per user output: None, or ``(owner, size, stride,
    storage_offset)`` when the output views the memory of an intermediate tensor that
    user output ``owner`` also views (or is), and the owner is dense and covers it. The
    offset is relative to the owner's own. The caller returns ``outputs[owner].as_strided(size, stride,
    outputs[owner].storage_offset() + offset)`` when the computed owner has the traced
    strides, so that the two share memory as they do in eager (a later in-place update of
    one, as after a graph break, shows in the other).

    ``num_hidden_outputs``: the last that many of the ``num_user_outputs`` user outputs
    are not the user's but intermediates that ``output_views`` entries view (user outputs
    that overlap in an intermediate's memory, none covering the others): the caller
    rebuilds those views on them (first copying one computed with other strides than
    its traced ones into a tensor that has them) and does not return them. They are
    user outputs in every other respect (``tangent_outputs``, the backward's tangents).

    ``offset_inputs`` lists the inputs whose storage offset the graphs assume to be 0:
    an ``as_strided`` on (a view of) such an input takes an absolute offset into its
    storage, and the backward traced for it places the gradient by that assumption. The
    caller must not run the graphs on such an input at another storage offset.

    ``constants`` holds the real tensors of the constants made inside the graph
    (``torch.tensor([1.0, 2.0])``) with elements, lifted out as hidden inputs: the
    forward's last ``len(constants)`` inputs, after the torch graph's. The caller passes
    these same tensors on every call (nothing per call grows with their size). The
    graphs never write them and never return them or a view of them (an output is a
    copy), so they keep their values across calls. The indices of the other fields count
    the torch graph's inputs only. Left out of equality and hashing.
    """

    forward: Graph
    backward: Graph | None = None
    num_user_outputs: int = 0
    mutated_inputs: tuple[int, ...] = ()
    num_saved: int = 0
    output_aliases: tuple[tuple[int, tuple[int, ...], tuple[int, ...], int] | None, ...] = ()
    output_views: tuple[tuple[int, tuple[int, ...], tuple[int, ...], int] | None, ...] = ()
    num_hidden_outputs: int = 0
    tangent_outputs: tuple[int, ...] = ()
    grad_inputs: tuple[int, ...] = ()
    num_unit_grads: int = 0
    offset_inputs: tuple[int, ...] = ()
    constants: tuple[torch.Tensor, ...] = attrs.field(default=(), eq=False)

    @property
    def num_mutations(self) -> int:
        """How many forward outputs are write-backs to inputs."""
        return len(self.mutated_inputs)


@attrs.frozen
class KernelInfo:
    """One generated (or extern) kernel of a compiled graph."""

    name: str
    backend: str  # "triton", "cpp" or "extern"
    source: str
    path: str | None = None
    ops: tuple[str, ...] = ()


@attrs.frozen
class CompiledGraph:
    """A graph turned into a callable: ``compiled(*tensors) -> tuple of tensors``.

    ``package``: plain data (JSON types only, no absolute paths) from which the stage
    that made this rebuilds it without scheduling again, through its
    ``torchstrata_codegen_load`` hook; None when it cannot be rebuilt that way. The
    runtime's compiled-graph cache stores it on disk.
    """

    fn: Callable[..., tuple[torch.Tensor, ...]]
    kernels: tuple[KernelInfo, ...] = ()
    eager_ops: tuple[str, ...] = ()
    stats: Mapping[str, Any] = attrs.field(factory=dict)
    launcher_source: str = ""
    #: The metadata (shape, dtype, strides) of each output as ``fn`` returns it; empty:
    #: as the compiled graph's outputs say. A backward that takes saved forward outputs
    #: is built for these layouts (:class:`~torchstrata.core.GraphContract`).
    output_layouts: tuple[TensorMeta | None, ...] = ()
    package: Mapping[str, Any] | None = attrs.field(default=None, eq=False, repr=False)

    def __call__(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.fn(*args)
