"""Pointwise values stored although the scheduler's rule 1 would inline them.

Rule 1 inlines every pointwise value into each kernel that reads it. Along a chain of
shared values that is quadratic: a transformer's residual stream ``x_k = x_(k-1) + f_k``
is read by layer k's norm and by ``x_(k+1)``, so the norm of layer k recomputes the
whole sum ``x_0 + f_1 + ... + f_k`` from the branch outputs, and the backward's residual
gradient does the same. The kernels then differ per layer (each sums one more term):
the work, the source and the compile time grow with the square of the depth, and the
kernels of identical layers are never identical.

A pointwise value is *stored* instead when it has two users or more and the realised
values it reaches through pointwise values only (reductions, extern operands, outputs,
values stored by this rule: the kernels that would inline it) number
:data:`SINKS_MIN` or more. Values are decided from the graph's end, so a value stored
here ends the chains of the values it reads: each ``x_k`` is stored once, read twice.
Values reaching fewer sinks (a norm's centred input read by its two sums and its output,
a softmax's shifted logits) stay inlined, in the one kernel that computes them.

Only values reading two buffers of their own size or more count (``x_(k-1)`` and
``f_k``): a norm's centred input ``x - mean`` reaches four sinks in a backward that
recomputes it, but storing it would trade one read of ``x`` for a write and a read.

A value with two users or more of which one is a view prim that an extern call (or the
graph's output) reads is stored too: the view would otherwise be a copy kernel that
recomputes the value (the backward's residual gradient reshaped for a matmul). A view
prim of a stored value becomes a view of its buffer (an extern call reads it through
``as_strided``, no copy), as views of inputs and extern results already are; so does a
view prim of a graph output or of an extern operand (stored anyway): a transposed
gradient that a matmul reads was a copy kernel.
"""

from __future__ import annotations

import attrs

from torchstrata.core import Graph, Node, Prim, TensorMeta, same_size
from torchstrata.inductor.schedule.lowering import (
    Extern,
    Lowered,
    Pointwise,
    Reduction,
    buffer_view,
)

#: The fewest realised values a shared pointwise value must reach to be stored.
SINKS_MIN = 4
_VIEW_PRIMS = frozenset(
    p.value
    for p in (Prim.BROADCAST_IN_DIM, Prim.RESHAPE, Prim.PERMUTE, Prim.SLICE, Prim.AS_STRIDED)
)


def _is_view_prim(node: Node) -> bool:
    return node.op is not None and node.op.name.removeprefix("prims.") in _VIEW_PRIMS


def shared_values(graph: Graph, lowered: dict[Node, Lowered]) -> frozenset[Node]:
    """The pointwise values of ``graph`` to store by the rule of the module docstring."""
    users: dict[Node, dict[Node, None]] = {}
    for node in graph.nodes:
        for arg in node.input_nodes():
            users.setdefault(arg, {})[node] = None
    outputs = set(graph.outputs)
    sources = _full_sources(graph, lowered)
    bit: dict[Node, int] = {}
    reach: dict[Node, int] = {}  # per pointwise value: the sinks it reaches, a bit each
    chosen: set[Node] = set()
    copied: set[Node] = set()  # view prims of computed values that would be copied
    for node in reversed(list(graph.nodes)):
        own = lowered.get(node)
        if not isinstance(own, Pointwise):
            continue
        readers = users.get(node, {})
        is_view = own.view is not None or _is_view_prim(node)
        if node in outputs or any(isinstance(lowered[u], Extern) for u in readers):
            reach[node] = bit.setdefault(node, 1 << len(bit))
            if is_view and own.view is None:
                copied.add(node)
            continue
        if is_view and own.view is None and any(u in copied for u in readers):
            copied.add(node)
        mask = 0
        for user in readers:
            if isinstance(lowered[user], Reduction):
                mask |= bit.setdefault(user, 1 << len(bit))
            else:
                mask |= reach.get(user, 0)
        if (
            len(readers) >= 2
            and not is_view
            and (
                any(u in copied for u in readers)
                or (mask.bit_count() >= SINKS_MIN and len(sources[node]) >= 2)
            )
        ):
            chosen.add(node)
            mask = bit.setdefault(node, 1 << len(bit))
        reach[node] = mask
    return frozenset(chosen)


def _full_sources(graph: Graph, lowered: dict[Node, Lowered]) -> dict[Node, frozenset[Node]]:
    """Per pointwise value, up to two of the buffers of its own size that it reads through
    pointwise values (a row statistic broadcast over the row does not count)."""
    found: dict[Node, frozenset[Node]] = {}
    for node in graph.nodes:
        if not isinstance(lowered.get(node), Pointwise):
            continue
        size = node.tensor_meta.numel
        reads: set[Node] = set()
        for arg in node.input_nodes():
            reads.update(found.get(arg, (arg,)))
        same = (
            r for r in reads if isinstance(r.meta, TensorMeta) and same_size(r.meta.numel, size)
        )
        found[node] = frozenset(sorted(same, key=lambda r: r.name)[:2])
    return found


def stored_anyway(graph: Graph, lowered: dict[Node, Lowered]) -> frozenset[Node]:
    """Computed values the scheduler realises whatever the rule says: graph outputs and
    operands of extern calls (a transposed gradient that a matmul reads is then a view of
    the gradient's buffer, not a copy kernel)."""
    found = set()
    for node in graph.nodes:
        if isinstance(lowered[node], Extern):
            found.update(node.input_nodes())
    found.update(graph.outputs)
    return frozenset(
        node
        for node in found
        if isinstance(own := lowered.get(node), Pointwise) and own.view is None
    )


def with_views_of(
    graph: Graph, lowered: dict[Node, Lowered], stored: frozenset[Node]
) -> dict[Node, Lowered]:
    """``lowered`` with each view prim of a value in ``stored`` (or of a view of one) made a
    view of its buffer (:func:`~torchstrata.inductor.schedule.lowering.buffer_view`)."""
    if not stored:
        return lowered
    result = dict(lowered)
    for node in graph.nodes:
        own = result.get(node)
        if not isinstance(own, Pointwise) or own.view is not None or not _is_view_prim(node):
            continue
        view = buffer_view(node, result, stored)
        if view is not None:
            result[node] = attrs.evolve(own, view=view)
    return result
