"""A scatter into zeros added to a tensor, as a scatter into that tensor.

``embedding_dense_backward`` decomposes into ``scatter_add(zeros, 0, index, rows)``. When
the embedding's weight is also used elsewhere (a GPT's tied head: ``lm_head.weight is
wte.weight``), its gradient is ``scatter_add(zeros, ...) + mm(...)``: a zero-filled
buffer of the whole table (4 MB for a vocabulary of 8192 by 128), a scatter that copies
it, and an add kernel that reads both tables and writes a third. Adding ``y`` to a scatter
of ``src`` into zeros is the scatter of ``src`` into ``y`` (the same sums in another
order), so ``add(scatter_add(zeros, d, i, s), y)`` becomes ``scatter_add(y, d, i, s)``;
the launcher then runs it in place on ``y``'s buffer when nothing else reads that buffer
(:mod:`~torchstrata.inductor.launch.in_place`).

Only when the scatter has no other reader, the zeros and ``y`` have the add's shape and
dtype (no broadcast, no promotion), and that dtype is a float one.
"""

from __future__ import annotations

from typing import Any

from torchstrata.core import Graph, Node, Transformer, prim
from torchstrata.inductor.passes.zeros import is_zeros

_ADD, _SCATTER_ADD = prim("add"), prim("scatter_add")


def _readers(graph: Graph) -> dict[Node, int]:
    """How many nodes read each node, a graph output counting as one more."""
    counts = {node: len(users) for node, users in graph.users().items()}
    for output in graph.outputs:
        counts[output] += 1
    return counts


def _scatter_and_addend(node: Node, readers: dict[Node, int]) -> tuple[Node, Node] | None:
    """``(scatter into zeros, the other addend)`` when ``node`` adds the two."""
    if node.op != _ADD or node.kwargs or len(node.args) != 2:
        return None
    meta = node.tensor_meta
    if not meta.dtype.is_floating_point:
        return None
    for scatter, other in (node.args, tuple(reversed(node.args))):
        if not (isinstance(scatter, Node) and isinstance(other, Node)):
            return None
        if scatter.op != _SCATTER_ADD or not is_zeros(scatter.args[0]):
            continue
        if readers[scatter] != 1 or scatter is other:
            continue
        if scatter.tensor_meta.dtype != meta.dtype or other.tensor_meta.dtype != meta.dtype:
            continue
        if scatter.tensor_meta.shape != meta.shape or other.tensor_meta.shape != meta.shape:
            continue
        return scatter, other
    return None


class _ScatterIntoAddend(Transformer):
    def __init__(self, graph: Graph) -> None:
        super().__init__(graph)
        self.readers = _readers(graph)

    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        found = _scatter_and_addend(node, self.readers)
        if found is None:
            return super().transform_node(node, args, kwargs)
        scatter, other = found
        _, dim, index, src = (self.env[a] if isinstance(a, Node) else a for a in scatter.args)
        return self.builder.call(_SCATTER_ADD, self.env[other], dim, index, src, name=node.name)


def scatter_into_addends(graph: Graph) -> Graph:
    """``graph`` with every ``add(scatter_add(zeros, d, i, s), y)`` (either order) replaced
    by ``scatter_add(y, d, i, s)`` (see the module docstring); the scatter into zeros is
    left for dead-code elimination."""
    readers = _readers(graph)
    if not any(_scatter_and_addend(node, readers) for node in graph.nodes):
        return graph
    return _ScatterIntoAddend(graph).run()
