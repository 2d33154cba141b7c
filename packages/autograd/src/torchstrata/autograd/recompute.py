"""Checkpointed regions: joint nodes that the backward recomputes rather than the forward
saving them.

Capture tags the nodes that ``torch.utils.checkpoint.checkpoint`` ran with
:data:`~torchstrata.core.RECOMPUTE` and their region's own tag. The joint trace runs each
tagged torch node with the recorder's builder tagged the same way, so the ATen nodes it
records carry the tags; :func:`classify` then names the joint nodes the partition may not
save (:attr:`JointTrace.recompute <torchstrata.autograd.JointTrace>`) and the region
outputs it must compute in the forward (``JointTrace.region_outputs``). Names, not tags,
go on: names survive the rewrites between tracing and partitioning, tags need not.

- Inside a region, whatever the backward needs it recomputes from the region's inputs,
  matmuls included, as eager checkpointing reruns the function.
- A region's output (a tagged value that a forward node outside its region reads) is
  computed in the forward and saved if the backward needs it, as eager's next op (or next
  checkpoint) saves it: otherwise ``x = checkpoint(block, x)`` in a loop would recompute
  every block from the first input before the backward could start.
- Random draws (``native_dropout`` and its results) may be saved: a draw made again would
  differ; saving the mask gives the numbers eager's checkpoint gets by restoring the
  random state. So may values the caller holds anyway (user outputs).

The backward graph then computes each recomputed value just before its first use
(:func:`lazy_order`), as eager's checkpoint recomputes a region when the backward reaches
it: computing them all first would hold every recomputed activation at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from torchstrata.core import GETITEM, RECOMPUTE, Graph, GraphBuilder, Node, recompute_regions


def recording(builder: GraphBuilder, node: Node) -> contextlib.AbstractContextManager[None]:
    """While ``node`` (torch level) runs: the ATen nodes recorded get its tags."""
    if not node.tags:
        return contextlib.nullcontext()
    return builder.tagged(node.tags)


def classify(graph: Graph, forward_count: int) -> tuple[frozenset[str], frozenset[str]]:
    """``(inside, outputs)``: the names of the nodes of ``graph`` (the recorded joint
    graph, whose first ``forward_count`` nodes are the forward's) tagged ``recompute``,
    less its region outputs, and those region outputs: tagged forward nodes that a forward
    node outside their region reads (an untagged one, or one of another region)."""
    forward = graph.nodes[:forward_count]
    tagged = [node for node in forward if RECOMPUTE in node.tags]
    if not tagged:
        return frozenset(), frozenset()
    outputs: set[str] = set()
    for user in forward:
        user_regions = recompute_regions(user)
        for source in user.input_nodes():
            if RECOMPUTE in source.tags and not recompute_regions(source) <= user_regions:
                outputs.add(source.name)
    inside = frozenset(node.name for node in tagged) - outputs
    return inside, frozenset(outputs)


def must_recompute(
    joint: Graph, names: frozenset[str], held: set[Node], is_random: Callable[[Node], bool]
) -> set[Node]:
    """The joint nodes the forward may not save: those named in ``names`` (the tagged
    ones), less random draws and their items (``is_random``) and the values in ``held``
    (primal inputs, user outputs)."""
    if not names:
        return set()
    return {
        node
        for node in _tagged(joint, names)
        if node not in held and not is_random(node) and not _item_of_random(node, is_random)
    }


def _tagged(joint: Graph, names: frozenset[str]) -> Iterator[Node]:
    return (node for node in joint.nodes if node.name in names)


def _item_of_random(node: Node, is_random: Callable[[Node], bool]) -> bool:
    return node.op == GETITEM and is_random(node.args[0])


def lazy_order(nodes: list[Node], eager: set[Node]) -> list[Node]:
    """``nodes`` (a topological order) with every node not in ``eager`` moved to just
    before its first reader among them (outputs read by none stay last): the nodes in
    ``eager`` (the tangent-dependent ones) keep their order."""
    members = set(nodes)
    placed: set[Node] = set()
    order: list[Node] = []

    def place(node: Node) -> None:
        stack = [(node, False)]
        while stack:
            current, expanded = stack.pop()
            if current in placed:
                continue
            if expanded:
                placed.add(current)
                order.append(current)
                continue
            stack.append((current, True))
            for source in reversed(current.input_nodes()):
                if source in members and source not in placed:
                    stack.append((source, False))

    for node in nodes:
        if node in eager:
            place(node)
    for node in nodes:
        place(node)
    return order
