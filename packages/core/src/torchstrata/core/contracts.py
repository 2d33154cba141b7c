"""What the runtime and the stages promise each other about one graph, beyond the graph.

The runtime knows things about a graph that the graph does not say: which outputs go
back to the user, which outputs it copies into inputs after a call, and in which layouts
it will pass the inputs (a backward's saved values come as the lowered forward returned
them). It hands them to the decomposition and codegen hooks as a :class:`GraphContract`
(the ``contract`` argument of ``torchstrata_decompose`` and ``torchstrata_codegen``). The
codegen reports the layouts its callable returns in
:attr:`~torchstrata.core.CompiledGraph.output_layouts`.

Two callbacks cross stage boundaries too, typed here so that no stage imports another:
:data:`SegmentCompiler` (capture compiles the graphs it finds after a graph break with
it) and :class:`DirectLauncher` (the ``torchstrata_direct_launch`` hook: launching a
Triton kernel without Triton's per-call dispatch).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from torchstrata.core.graph import Graph
from torchstrata.core.meta import TensorMeta
from torchstrata.core.transform import with_input_metas


def _check_count(instance: Any, attribute: Any, value: Any) -> None:
    if type(value) is not int or value < 0:
        raise ValueError(f"{attribute.name}={value!r} must be an int >= 0")


@attrs.frozen
class WriteBack:
    """After each call the caller copies graph output ``output`` into graph input
    ``input`` (an update of that input, made functional)."""

    output: int = attrs.field(validator=_check_count)
    input: int = attrs.field(validator=_check_count)


def _write_backs(value: Any) -> tuple[WriteBack, ...]:
    """A tuple of :class:`WriteBack`, also from a ``{output: input}`` mapping."""
    if isinstance(value, Mapping):
        return tuple(WriteBack(output, index) for output, index in value.items())
    items = tuple(value)
    for item in items:
        if not isinstance(item, WriteBack):
            raise TypeError(f"write_backs holds {item!r}, not a WriteBack")
    return items


def _layouts(value: Any) -> tuple[TensorMeta | None, ...]:
    items = tuple(value)
    for item in items:
        if item is not None and not isinstance(item, TensorMeta):
            raise TypeError(f"input_layouts holds {item!r}, not a TensorMeta or None")
    return items


@attrs.frozen
class GraphContract:
    """What the caller of one graph's lowering promises and expects.

    * ``user_outputs``: the first that many outputs are returned to the user; the
      decomposition gives them the layouts eager gives them (0: none is the user's, as
      for a backward graph).
    * ``write_backs``: outputs the caller copies into inputs after each call; the codegen
      may then compute such an output in place, in its input (inference graphs only: a
      training graph's inputs may be saved for the backward).
    * ``input_layouts``: one entry per leading input, the metadata the caller passes that
      input with (None: as the graph's input says). Only the strides may differ from the
      graph's input; the decomposition builds the graph for them
      (:meth:`laid_out`), and the runtime checks that it did.
    """

    user_outputs: int = attrs.field(default=0, validator=_check_count)
    write_backs: tuple[WriteBack, ...] = attrs.field(default=(), converter=_write_backs)
    input_layouts: tuple[TensorMeta | None, ...] = attrs.field(default=(), converter=_layouts)

    def write_back_inputs(self) -> dict[int, int]:
        """``{output index: input index}`` of :attr:`write_backs`."""
        return {write_back.output: write_back.input for write_back in self.write_backs}

    def laid_out(self, graph: Graph) -> Graph:
        """``graph`` with its inputs given :attr:`input_layouts` (and the metadata of the
        nodes that depend on them inferred again); ``graph`` itself when none differs.

        Raises ``ValueError`` for more layouts than inputs, or a layout of another shape,
        dtype or device than its input's (a contract for another graph)."""
        return with_input_metas(graph, self._input_metas(graph))

    def follows_layouts(self, graph: Graph) -> bool:
        """Whether ``graph``'s inputs have :attr:`input_layouts` (a lowering that
        honoured the contract)."""
        metas = self._input_metas(graph)
        return all(graph.inputs[position].meta == meta for position, meta in metas.items())

    def _input_metas(self, graph: Graph) -> dict[int, TensorMeta]:
        if len(self.input_layouts) > len(graph.inputs):
            raise ValueError(
                f"the contract lays out {len(self.input_layouts)} inputs; the graph has "
                f"{len(graph.inputs)}"
            )
        metas = {}
        for position, layout in enumerate(self.input_layouts):
            if layout is None:
                continue
            meta = graph.inputs[position].meta
            if not isinstance(meta, TensorMeta) or (meta.shape, meta.dtype, meta.device) != (
                layout.shape,
                layout.dtype,
                layout.device,
            ):
                raise ValueError(
                    f"input {position} ({graph.inputs[position].name}) is {meta}; the "
                    f"contract lays it out as {layout} (only strides may differ)"
                )
            metas[position] = attrs.evolve(meta, strides=layout.strides)
        return metas


#: The contract of a graph with no promises: no user outputs laid out as eager's, no
#: write-backs, inputs as the graph says.
NO_CONTRACT = GraphContract()

#: Compiles a torch-level graph that capture found after a graph break (on its first
#: run) into a callable taking the graph's inputs and returning its outputs.
SegmentCompiler = Callable[[Graph], Callable[..., Any]]


class DirectLauncher(Protocol):
    """The ``torchstrata_direct_launch`` hook (or anything called like it): a launch of
    the Triton ``kernel`` on ``grid`` with ``constants`` (constexpr values and
    ``num_warps``) that skips Triton's per-call dispatch, falling back to ``fallback``
    (Triton's own launch, same arguments) where it cannot; None when none is available.
    Hashable: callers cache launches per launcher."""

    def __hash__(self) -> int: ...

    def __call__(
        self,
        *,
        kernel: Any,
        grid: tuple[int, ...],
        constants: dict[str, Any],
        fallback: Callable[..., None],
    ) -> Callable[..., None] | None: ...
