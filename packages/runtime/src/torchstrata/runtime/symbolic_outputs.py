"""The outputs of a graph lowered once for many sizes that alias its inputs or each
other, rebuilt at each call's sizes (issue 33, decision 0445).

A runner returns an output that is a view of an input (``x[:, : t // 2]``,
``x.transpose(0, 1)``, ``x.view(-1, d)``) as ``input.as_strided(size, stride, offset)``,
and an output that views another (``y, y[: n // 2]``) as such a view of that output
(:func:`~.runners.inference_runner`, ``AotResult.output_aliases`` and ``output_views``).
The per-size path carries those sizes, strides and offsets at the traced sizes. A
lowering for many sizes takes them from the symbolic partition instead (its entries are
expressions over the graph's symbols) and evaluates them at each call's sizes
(:class:`SizedOutputs`), once per distinct size: a dict lookup per call after that.
What it evaluates (:class:`ViewLayouts`) is what a lowering's compiled-graph cache entry
stores of its outputs, read back as sympy expressions (decision 0505).

The expressions hold for the call's inputs as the entry's guards describe them: a
symbolic entry's guards check each input's strides (a transposed or sliced input is an
entry of its own), so the input's strides are the expressions the trace had.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch

from torchstrata.core import AotResult, Graph, TensorMeta
from torchstrata.core.symbolic import evaluate
from torchstrata.runtime.runners import output_views
from torchstrata.runtime.symbolic_recording import note_outputs

#: (output aliases, output views) of one call, as the runners take them
OutputLayouts = tuple[tuple[Any, ...], tuple[Any, ...]]


@attrs.frozen
class ViewLayouts:
    """What a partition's outputs that alias inputs or each other are, with symbolic
    sizes (``torch.SymInt`` where traced, sympy expressions where read from the
    compiled-graph cache, decision 0505): ``aliases`` and ``views`` as
    ``AotResult.output_aliases`` and ``output_views``, and ``owners``: for each output
    a view is made of, ``(position, shape, strides, dtype, device)`` (the runner lays an
    owner out so before viewing it)."""

    aliases: tuple[Any, ...]
    views: tuple[Any, ...]
    owners: tuple[tuple[int, tuple[Any, ...], tuple[Any, ...], torch.dtype, torch.device], ...]

    @classmethod
    def of(cls, symbolic: AotResult) -> ViewLayouts:
        """The layouts of a partition with symbolic sizes."""
        views = tuple(symbolic.output_views or ())
        owners = []
        for position in sorted({view[0] for view in views if view is not None}):
            meta = symbolic.forward.outputs[position].meta
            if isinstance(meta, TensorMeta):
                owners.append((position, meta.shape, meta.strides, meta.dtype, meta.device))
        return cls(tuple(symbolic.output_aliases or ()), views, tuple(owners))


class SizedOutputs:
    """The output aliases and views of a symbolic partition at each call's sizes.

    :param slots: symbol name -> (input position, dim) where a call's value of it is read
        (``core.input_symbol_slots`` of the entry's graph).
    :param symbolic: the partition (``SymbolicAot.result``; only its counts are read
        where ``layouts`` is given).
    :param layouts: its outputs' :class:`ViewLayouts` (default: ``symbolic``'s).

    :raises NotImplementedError: where an entry mentions a symbol no input dim gives.
    """

    def __init__(
        self,
        slots: Mapping[str, tuple[int, int]],
        symbolic: AotResult,
        layouts: ViewLayouts | None = None,
    ) -> None:
        self._names = tuple(sorted(slots))
        self._symbolic = symbolic
        #: what is evaluated at each call's sizes (what the compiled-graph cache stores)
        self.layouts = ViewLayouts.of(symbolic) if layouts is None else layouts
        reads = "".join(f"inputs[{slots[n][0]}].shape[{slots[n][1]}], " for n in self._names)
        namespace: dict[str, Any] = {}
        source = f"def key(inputs):\n    return ({reads})\n"
        exec(compile(source, "<torchstrata sized outputs>", "exec"), namespace)
        self._key = namespace["key"]
        self._at: dict[tuple[int, ...], OutputLayouts] = {}

    def at_values(self, values: Mapping[str, int]) -> OutputLayouts:
        """The (aliases, views) at the sizes ``values`` (symbol name -> int)."""
        layouts = self.layouts
        aliases, views = sizes_at((layouts.aliases, layouts.views), values)
        if _symbolic_left((aliases, views)):
            raise NotImplementedError("an output view's metadata mentions sizes no input gives")
        metas: list[Any] = [None] * len(self._symbolic.forward.outputs)
        for position, shape, strides, dtype, device in layouts.owners:
            at = sizes_at((shape, strides), values)
            metas[position] = TensorMeta(at[0], dtype, device, at[1])
        concrete = attrs.evolve(self._symbolic, output_views=views)
        return tuple(aliases), output_views(concrete, metas)

    def __call__(self, inputs: Sequence[Any]) -> OutputLayouts:
        """The (aliases, views) at the sizes of the call whose inputs are ``inputs``."""
        key = self._key(inputs)
        found = self._at.get(key)
        if found is None:
            found = self._at[key] = self.at_values(dict(zip(self._names, key, strict=True)))
        return found


def sizes_at(value: Any, values: Mapping[str, int]) -> Any:
    """``value`` (tuples of ints, ``SymInt`` sizes and sympy expressions) with each size
    evaluated at ``values`` (symbol name -> int)."""
    if isinstance(value, tuple):
        return tuple(sizes_at(item, values) for item in value)
    return evaluate(value, values)


def _symbolic_left(value: Any) -> bool:
    """Whether ``value`` (tuples of ints) still holds something not an int or None."""
    if isinstance(value, tuple):
        return any(map(_symbolic_left, value))
    return not (value is None or type(value) is int)


def sized_outputs(
    slots: Mapping[str, tuple[int, int]],
    symbolic: AotResult,
    aot: AotResult,
    values: Mapping[str, int],
    layouts: ViewLayouts | None = None,
) -> SizedOutputs | None:
    """The :class:`SizedOutputs` of a lowering whose partition ``aot`` (at the sizes
    ``values``, from ``symbolic``) returns views; None where it returns none.
    ``layouts``: the symbolic layouts of its outputs where they are not ``symbolic``'s
    (read from the compiled-graph cache). Noted for the lowering's cache entry.

    :raises NotImplementedError: where the symbolic entries at ``values`` are not
        ``aot``'s (the trace and its partition at these sizes disagree: per size).
    """
    aliases = tuple(aot.output_aliases or ())
    views = tuple(aot.output_views or ())
    if all(alias is None for alias in aliases) and all(view is None for view in views):
        return None
    sized = SizedOutputs(slots, symbolic, layouts)
    got_aliases, _ = sized.at_values(values)
    got_views = sizes_at(sized.layouts.views, values)
    if got_aliases != aliases or tuple(got_views) != views:
        raise NotImplementedError(
            "the symbolic partition's output views differ from this size's: per size"
        )
    note_outputs(sized.layouts)  # for the compiled-graph cache's entry (decision 0505)
    return sized


def inputs_for_aliases(forward: Graph, aliases: Sequence[Any], views: Sequence[Any]) -> Graph:
    """``forward`` (ATen, an inference partition's) returning, at each user output that
    aliases an input of its dtype (``aliases``: ``AotResult.output_aliases``), that input
    itself, and at each that views another output (``views``: ``output_views``), that
    output: the runner rebuilds such outputs as views and never reads the computed
    values, so no kernel need compute them (nor decide on their sizes)."""
    outputs = list(forward.outputs)
    for position, view in enumerate(views):
        if view is not None and view[0] < len(outputs):
            outputs[position] = forward.outputs[view[0]]
    for position, alias in enumerate(aliases):
        if alias is None:
            continue
        source, computed = forward.inputs[alias[0]], outputs[position]
        if (
            isinstance(source.meta, TensorMeta)
            and isinstance(computed.meta, TensorMeta)
            and source.meta.dtype == computed.meta.dtype
        ):
            outputs[position] = source
    if outputs == list(forward.outputs):
        return forward
    return Graph(forward.level, forward.inputs, forward.nodes, tuple(outputs))
