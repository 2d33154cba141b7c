"""Inputs whose storage offset a traced graph depends on.

Graph inputs are traced from their metadata, which has no storage offset: every fake
input starts at the beginning of its storage. Views are relative to their base, so
that is harmless for them. ``as_strided`` is not: its ``storage_offset`` argument is an
absolute position in the storage. Its forward runs as an ATen call on the real tensor
and is right at any offset, but its derivative (``as_strided_scatter`` into a zero
buffer, then the input's geometry cut out of it) was traced for an input at offset 0,
and puts the gradient in the wrong places for an input that starts elsewhere in its
storage (a slice, a non-contiguous copy). Such inputs are listed in
``AotResult.offset_inputs`` for the caller to check.
"""

from __future__ import annotations

from torchstrata.core import Graph, Node

#: Ops that take an absolute storage offset.
ABSOLUTE_OFFSET_OPS = frozenset(
    {
        "aten.as_strided.default",
        "aten.as_strided_copy.default",
        "aten.as_strided_scatter.default",
    }
)


def offset_inputs(graph: Graph, num_primals: int) -> tuple[int, ...]:
    """Positions of the primal inputs of ``graph`` (an ATen graph) that an op taking an
    absolute storage offset reads, directly or through views."""
    position = {node: index for index, node in enumerate(graph.inputs[:num_primals])}
    found: set[int] = set()
    for node in graph.nodes:
        if node.op is None or node.op.name not in ABSOLUTE_OFFSET_OPS or not node.args:
            continue
        source = node.args[0]
        while isinstance(source, Node) and _is_view(source):
            source = source.args[0]
        if isinstance(source, Node) and source in position:
            found.add(position[source])
    return tuple(sorted(found))


def _is_view(node: Node) -> bool:
    return node.op is not None and bool(node.args) and node.op.is_view
