"""Splitting one torch-level graph into a chain of sub-graphs run one after another.

Each sub-graph is compiled on its own (its own ``autograd.Function``), so its backward
ends, and the gradients of the parameters it reads are handed to autograd, before the
backward of the sub-graph ahead of it starts. DDP's reducer all-reduces a bucket as soon
as its last gradient arrives, so a bucket whose parameters a late sub-graph reads is on
the wire while earlier sub-graphs' backwards still compute.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import attrs

from torchstrata.core import Graph, Node, TensorMeta
from torchstrata.core.graph import map_nodes


@attrs.frozen
class Piece:
    """One sub-graph of a split and how it is wired.

    ``reads`` names, for each input of ``graph``, the node of the original graph whose
    value it takes (an original input or an earlier piece's output); ``writes`` names,
    for each output of ``graph``, the original node whose value it is.
    """

    graph: Graph
    reads: tuple[Node, ...]
    writes: tuple[Node, ...]


def valid_cuts(graph: Graph) -> list[int]:
    """The positions ``i`` in ``graph.nodes`` before which the graph may be cut: every
    value made before ``i`` and read at or after ``i`` (or returned) is one tensor, and
    no node from ``i`` on updates in place a value made before ``i``."""
    users = graph.users()
    position = {node: index for index, node in enumerate(graph.nodes)}
    last_read: dict[Node, int] = {}
    end = len(graph.nodes)
    for node in graph.nodes:
        for user in users[node]:
            last_read[node] = max(last_read.get(node, -1), position[user])
    for node in graph.outputs:
        if node in position:
            last_read[node] = end
    cuts = []
    live_bad = 0  # values made before the cut, read after it, that are not one tensor
    ends_at: dict[int, int] = {}
    for index, node in enumerate(graph.nodes):
        # a value whose last read is before ``index`` is no longer live
        live_bad -= ends_at.pop(index, 0)
        if index > 0 and live_bad == 0:
            cuts.append(index)
        last = last_read.get(node, -1)
        if last > index and not isinstance(node.meta, TensorMeta):
            live_bad += 1
            ends_at[last + 1] = ends_at.get(last + 1, 0) + 1
    return cuts


def has_in_place_ops(graph: Graph) -> bool:
    """Whether a node updates a value in place (a torch method or function ending in
    ``_``, as ``Tensor.add_``, or called with ``inplace=True``): a split could then
    separate the update from a reader that saved the old value, so such graphs are not
    split."""
    for node in graph.nodes:
        if node.op is None:
            continue
        leaf = node.op.name.rsplit(".", 1)[-1]
        if leaf.endswith("_") and not leaf.endswith("__"):
            return True
        if node.kwargs.get("inplace") is True:
            return True
    return False


def split_graph(graph: Graph, cuts: Sequence[int]) -> list[Piece]:
    """``graph`` cut before each position in ``cuts`` (sorted, each from
    :func:`valid_cuts`) into pieces that, run in order, compute what ``graph`` does."""
    bounds = [0, *sorted(set(cuts)), len(graph.nodes)]
    owner: dict[Node, int] = {node: -1 for node in graph.inputs}
    for piece_index, (start, stop) in enumerate(itertools.pairwise(bounds)):
        for node in graph.nodes[start:stop]:
            owner[node] = piece_index
    # what each piece must hand on: its values that a later piece or the outputs read
    needed: list[dict[Node, None]] = [{} for _ in bounds[1:]]
    for node in graph.nodes:
        for arg in node.input_nodes():
            if 0 <= owner[arg] < owner[node]:
                needed[owner[arg]][arg] = None
    for node in graph.outputs:
        if owner[node] >= 0:
            needed[owner[node]][node] = None
    pieces = []
    for piece_index, (start, stop) in enumerate(itertools.pairwise(bounds)):
        pieces.append(_piece(graph, graph.nodes[start:stop], list(needed[piece_index])))
    return pieces


def _piece(graph: Graph, nodes: Sequence[Node], outputs: list[Node]) -> Piece:
    inside = set(nodes)
    new: dict[Node, Node] = {}
    reads: list[Node] = []

    def rebuilt(node: Node) -> Node:
        if node in new:
            return new[node]
        assert node not in inside, f"%{node.name} read before it is made"
        placeholder = Node(node.name, None, meta=node.meta)
        new[node] = placeholder
        reads.append(node)
        return placeholder

    body = []
    for node in nodes:
        args = map_nodes(node.args, rebuilt)
        kwargs = map_nodes(dict(node.kwargs), rebuilt)
        copy = attrs.evolve(node, args=args, kwargs=kwargs)
        new[node] = copy
        body.append(copy)
    # inputs in the original graph's order first (their names stay), then intermediates
    order = {node: index for index, node in enumerate(graph.all_nodes())}
    reads.sort(key=order.__getitem__)
    piece_graph = Graph(
        graph.level, tuple(new[node] for node in reads), tuple(body), tuple(new[o] for o in outputs)
    )
    return Piece(piece_graph, tuple(reads), tuple(outputs))
