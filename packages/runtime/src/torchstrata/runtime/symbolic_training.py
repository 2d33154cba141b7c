"""A training graph (forward and backward) lowered once for many sizes (issue 33,
decision 0395), beside the inference forward of :mod:`.symbolic_lowering` (0381).

The backward of the entry's symbolic partition is decomposed once with its sizes
symbolic (decision 0280) and lowered with the forward's :class:`core.SizeGuards`: its
decisions on sizes are conditions of the same lowering, which serves only the sizes that
meet the forward's and the backward's. Both are lowered when the lowering is made, not
at the first backward (the per-size path's :class:`~.runners.LazyGraphFn`): a backward
lowered later could decide conditions that a size already served does not meet.

What the per-size runner (:func:`~.runners.training_runner`) carries at the traced sizes
is computed from the call's sizes here (:class:`SizedMetas`): the shape of a zero
tangent for an output given no gradient, and the layouts the backward expects its saved
values in (checked on the first backward at each size). What cannot be is refused with
``NotImplementedError`` (the entry lowers per size): a forward that returns a saved value
in another layout than the backward graph takes it in, an ``as_strided`` on an input
(``offset_inputs``), a graph the autograd stage gave no backward. A forward with unit
gradients (a scalar loss's) keeps them at every call: a tangent other than 1 scales them
(the per-size path would run a forward without them, lowered later on its own). A
backward that mentions symbols no input dim gives takes a size carrier
(:func:`with_size_carrier`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch

from torchstrata.core import (
    AotResult,
    CompiledGraph,
    Graph,
    Node,
    TensorMeta,
    graph_symbols,
    input_symbol_slots,
)
from torchstrata.runtime.runners import (
    GraphRunner,
    OutputsAt,
    saved_layout_mismatches,
    training_runner,
)
from torchstrata.runtime.symbolic_backward import EagerBackward, SizedBackward
from torchstrata.runtime.symbolic_recording import note_training


class SizedMetas:
    """Tensor metadata of a symbolic lowering (sizes ``core.SizeValue`` or ints) as
    functions of the call's sizes.

    :param slots: symbol name -> (input position, dim) where a call's value of it is read
        (``core.input_symbol_slots`` of the entry's graph).
    :param outputs: the forward's user outputs' metadata (a zero tangent's shape).
    :param saved: the layouts the backward takes its saved values in.
    :param carried: the shape of the backward's size carrier (symbol names), if it has one.
    :param device: the device of that carrier (the backward's).

    Made within the lowering's ``SizeGuards.active()``: a size that does not print as
    integer arithmetic is a refused read there (``core.SizeRead``).
    """

    def __init__(
        self,
        slots: Mapping[str, tuple[int, int]],
        outputs: Sequence[Any],
        saved: Sequence[Any],
        carried: Sequence[str] = (),
        device: torch.device | None = None,
    ) -> None:
        self._names = tuple(sorted(slots))
        reads = "".join(f"inputs[{slots[n][0]}].shape[{slots[n][1]}], " for n in self._names)
        self._outputs = [meta if isinstance(meta, TensorMeta) else None for meta in outputs]
        self._saved = [meta if isinstance(meta, TensorMeta) else None for meta in saved]
        layouts = ", ".join(
            "None" if meta is None else f"(({_dims(meta.shape)}), ({_dims(meta.strides)}))"
            for meta in (*self._outputs, *self._saved)
        )
        params = ", ".join(self._names)
        carrier = f"(base.expand({', '.join(carried)}),)" if carried else "()"
        source = (
            f"def key(inputs):\n    return ({reads})\n"
            f"def layouts({params}):\n    return ({layouts}{',' if layouts else ''})\n"
            f"def carrier({params}):\n    return {carrier}\n"
        )
        namespace: dict[str, Any] = {"base": torch.zeros((), dtype=torch.int8, device=device)}
        exec(compile(source, "<torchstrata sized metas>", "exec"), namespace)
        #: ``key(inputs)``: the call's sizes (one per symbol, sorted by name)
        self.key: Callable[[Sequence[Any]], tuple[int, ...]] = namespace["key"]
        self._layouts: Callable[..., tuple[Any, ...]] = namespace["layouts"]
        self._carrier: Callable[..., tuple[torch.Tensor, ...]] = namespace["carrier"]
        self._at: dict[tuple[int, ...], list[TensorMeta | None]] = {}
        self._restrided: dict[tuple[int, ...], list[int]] = {}

    def _metas(self, key: tuple[int, ...]) -> list[TensorMeta | None]:
        made = self._at.get(key)
        if made is None:
            made = []
            for meta, layout in zip((*self._outputs, *self._saved), self._layouts(*key)):
                if meta is None:
                    made.append(None)
                else:
                    shape, strides = layout
                    made.append(TensorMeta(shape, meta.dtype, meta.device, strides))
            self._at[key] = made
        return made

    def output_meta(self, index: int, key: tuple[int, ...]) -> TensorMeta | None:
        """The user output ``index``'s metadata at the sizes ``key``."""
        return self._metas(key)[index]

    def saved_metas(self, key: tuple[int, ...]) -> list[TensorMeta | None]:
        """The layouts the backward takes its saved values in at the sizes ``key``."""
        return self._metas(key)[len(self._outputs) :]

    def backward_inputs(self, key: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
        """What the backward takes after its tangents at the sizes ``key``: its size
        carrier (:func:`with_size_carrier`; a view of one 0-dim tensor, no memory), or
        nothing."""
        return self._carrier(*key)

    def check_saved(self, saved: Sequence[Any], key: tuple[int, ...]) -> Sequence[Any]:
        """The saved values to pass to the backward at the sizes ``key``: as the per-size
        runner's check (``runners.saved_layout_mismatches``), on the first backward at
        each size, against the layouts at that size."""
        restrided = self._restrided.get(key)
        if restrided is None:
            restrided = self._restrided[key] = saved_layout_mismatches(saved, self.saved_metas(key))
        if not restrided:
            return saved
        expected = self.saved_metas(key)
        fixed = list(saved)
        for position in restrided:
            meta = expected[position]
            assert meta is not None
            copy = torch.empty_strided(
                meta.shape, meta.strides, dtype=meta.dtype, device=fixed[position].device
            )
            fixed[position] = copy.copy_(fixed[position])
        return fixed


def _dims(values: Sequence[Any]) -> str:
    """A shape or strides (ints and ``SizeValue`` sizes) as tuple source over the symbols
    (``repr``: Python's spelling of a floor division or modulo, ``(s0//2)``)."""
    return "".join(f"{value!r}, " for value in values)


def with_size_carrier(backward: Graph, forward: Graph) -> Graph:
    """``backward`` (symbolic sizes), with one more input last where it mentions symbols
    that no input dim is (a sum's gradient expanded to ``[s0, s1]`` from a scalar
    tangent): a size carrier, ``int8[s0, s1]`` of strides 0, which the runner passes
    (:meth:`SizedMetas.carrier`) and the launcher binds the symbols from. ``backward``
    itself where every symbol is an input dim; ``forward``'s inputs give the sizes."""
    unbound = sorted(graph_symbols(backward) - set(input_symbol_slots(backward)))
    if not unbound:
        return backward
    slots = input_symbol_slots(forward)
    if any(name not in slots for name in unbound):
        raise NotImplementedError(f"symbols {unbound} are no size of the forward's inputs")
    sizes = []
    for name in unbound:
        position, dim = slots[name]
        sizes.append(forward.inputs[position].tensor_meta.shape[dim])
    # on the device of the input it reads the sizes of (a CUDA backward's, decision 0440)
    device = forward.inputs[slots[unbound[0]][0]].tensor_meta.device
    meta = TensorMeta(tuple(sizes), torch.int8, device, strides=(0,) * len(sizes))
    carrier = Node(CARRIER, None, meta=meta)
    return Graph(backward.level, (*backward.inputs, carrier), backward.nodes, backward.outputs)


#: the name of a backward's size carrier input (:func:`with_size_carrier`)
CARRIER = "size_carrier"


def refuse_training(aot: AotResult) -> None:
    """Raise ``NotImplementedError`` where a training graph's runner would carry something
    of the traced sizes that is not computed from the call's (see the module docstring)."""
    if aot.backward is None:
        raise NotImplementedError("a training graph without a backward graph lowers per size")
    if tuple(getattr(aot, "offset_inputs", ()) or ()):
        raise NotImplementedError("an as_strided on an input (its offset checked) lowers per size")


def saved_outputs(forward: Graph, aot: AotResult) -> tuple[Any, ...]:
    """The metadata of the saved values among a prims ``forward``'s outputs."""
    first = len(forward.outputs) - aot.num_unit_grads - aot.num_saved
    return tuple(node.meta for node in forward.outputs[first : first + aot.num_saved])


def refuse_other_layouts(produced: Sequence[Any], backward: Graph, num_saved: int) -> None:
    """Raise ``NotImplementedError`` unless the forward returns each saved value
    (``produced``) in the layout the backward graph's input takes it in, at every size:
    shapes equal as expressions, strides too where a dim is not 1. (The per-size path
    builds the backward for the forward's layout; a symbolic decomposition is made for
    the graph's own input layouts.)"""
    for position, (have, node) in enumerate(zip(produced, backward.inputs[:num_saved])):
        want = node.meta
        if not isinstance(want, TensorMeta) or not isinstance(have, TensorMeta):
            if isinstance(want, TensorMeta) or isinstance(have, TensorMeta):
                raise NotImplementedError(f"saved value {position} is no tensor on one side")
            continue
        same = (
            have.dtype == want.dtype
            and len(have.shape) == len(want.shape)
            and all(_same(a, b) for a, b in zip(have.shape, want.shape))
            and all(
                _is_one(size) or _same(a, b)
                for size, a, b in zip(have.shape, have.strides, want.strides)
            )
        )
        if not same:
            raise NotImplementedError(
                f"the forward returns saved value {position} in another layout than the "
                "backward takes (the backward would be built for it per size)"
            )


def _expr(value: Any) -> Any:
    return getattr(value, "expr", value)


def _same(a: Any, b: Any) -> bool:
    """Whether two sizes (ints or ``SizeValue``) are equal at every size, deciding
    nothing."""
    if type(a) is int and type(b) is int:
        return a == b
    import sympy  # type: ignore[import-untyped]

    return bool(sympy.expand(_expr(a) - _expr(b)) == 0)


def _is_one(size: Any) -> bool:
    return type(size) is int and size == 1


def symbolic_training_runner(
    aot: AotResult,
    forward: tuple[Graph, CompiledGraph],
    backward: tuple[Graph, CompiledGraph],
    slots: Mapping[str, tuple[int, int]],
    outputs_at: OutputsAt | None = None,
    eager: EagerBackward | None = None,
) -> GraphRunner:
    """The runner of a forward and a backward lowered once for many sizes (each a sized
    prims graph and its compiled form, of one ``SizeGuards``), as the per-size path's
    :func:`~.runners.training_runner` with its metadata at each call's sizes; ``aot``:
    the partition at the lowering's sizes (only its counts and constants are read);
    ``outputs_at``: the output aliases and views at each call's sizes; ``eager``: the
    ATen backward graph at a call's sizes, which a size's first backward falls back to
    where the compiled one raises (:mod:`.symbolic_backward`). Within
    ``SizeGuards.active()``; raises ``NotImplementedError`` where the forward returns a
    saved value in another layout than the backward takes."""
    (forward_graph, forward_fn), (backward_graph, backward_fn) = forward, backward
    refuse_other_layouts(saved_outputs(forward_graph, aot), backward_graph, aot.num_saved)
    metas = training_metas(aot, forward_graph, backward_graph)
    note_training(metas)  # for the compiled-graph cache's entry (decision 0450)
    return sized_training_runner(aot, forward_fn, backward_fn, slots, metas, outputs_at, eager)


@attrs.frozen
class TrainingMetas:
    """What a training runner lowered for many sizes computes from a call's sizes (the
    arguments of :class:`SizedMetas`): the forward's user outputs' metadata, the layouts
    the backward takes its saved values in, and the symbols of its size carrier."""

    outputs: tuple[Any, ...]
    saved: tuple[Any, ...]
    carried: tuple[str, ...]
    #: the device of the size carrier (the backward's, decision 0440)
    device: torch.device | None = None


def training_metas(aot: AotResult, forward: Graph, backward: Graph) -> TrainingMetas:
    """The :class:`TrainingMetas` of a sized prims ``forward`` and ``backward``; raises
    ``NotImplementedError`` where the backward takes another count of inputs than the
    runner passes."""
    # the user outputs and the write-backs (a zero tangent's shape is read of the first)
    num_user = len(forward.outputs) - aot.num_saved - aot.num_unit_grads
    carrier = backward.inputs[-1]
    carried = () if carrier.name != CARRIER else tuple(map(str, carrier.tensor_meta.shape))
    device = carrier.tensor_meta.device if carried else None
    taken = aot.num_saved + len(aot.tangent_outputs) + bool(carried)
    if len(backward.inputs) != taken:  # the runner would pass another count
        raise NotImplementedError(f"a backward of {len(backward.inputs)} inputs, not {taken}")
    return TrainingMetas(
        tuple(node.meta for node in forward.outputs[:num_user]),
        tuple(node.meta for node in backward.inputs[: aot.num_saved]),
        carried,
        device,
    )


def sized_training_runner(
    aot: AotResult,
    forward: CompiledGraph,
    backward: CompiledGraph,
    slots: Mapping[str, tuple[int, int]],
    metas: TrainingMetas,
    outputs_at: OutputsAt | None = None,
    eager: EagerBackward | None = None,
) -> GraphRunner:
    """The training runner of a compiled ``forward`` and ``backward`` lowered for many
    sizes, their metadata ``metas`` computed at each call's sizes (within the lowering's
    ``SizeGuards.active()``; ``outputs_at``: the output aliases and views at each
    call's sizes; ``eager``: the ATen backward graph at given sizes, None: a backward
    that raises does not fall back): what :func:`symbolic_training_runner` makes, and
    what the compiled-graph cache makes again from a stored lowering (decision 0450)."""
    sized = SizedMetas(slots, metas.outputs, metas.saved, metas.carried, metas.device)
    backwards = SizedBackward(backward, sorted(slots), eager)
    return training_runner(
        forward,
        backward,
        aot,
        None,
        sized=sized,
        outputs_at=outputs_at,
        backward_at=backwards.at,
    )
