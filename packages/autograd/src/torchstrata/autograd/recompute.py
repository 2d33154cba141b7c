"""Checkpointed regions: joint nodes that the backward recomputes rather than the forward
saving them.

Capture tags the nodes that ``torch.utils.checkpoint.checkpoint`` ran with
:data:`~torchstrata.core.RECOMPUTE`. The joint trace runs each tagged torch node with the
recorder's builder tagged the same way, so the ATen nodes it records carry the tag; their
names are kept in :attr:`JointTrace.recompute <torchstrata.autograd.JointTrace>` (names
survive the rewrites between tracing and partitioning, tags need not). The partitioner
then may not save these nodes: whatever the backward needs of them it recomputes from the
region's inputs, matmuls included, as eager checkpointing reruns the function.

Exceptions, each a value the partitioner may still save:

- random draws (``native_dropout`` and its results): a draw made again would differ;
  saving the mask gives the numbers eager's checkpoint gets by restoring the random state;
- values the caller holds anyway (user outputs): saving them writes nothing more.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from torchstrata.core import GETITEM, RECOMPUTE, Graph, GraphBuilder, Node


def recording(builder: GraphBuilder, node: Node) -> contextlib.AbstractContextManager[None]:
    """While ``node`` (torch level) runs: the ATen nodes recorded get its tags."""
    if not node.tags:
        return contextlib.nullcontext()
    return builder.tagged(node.tags)


def recompute_names(graph: Graph) -> frozenset[str]:
    """The names of the nodes of ``graph`` tagged ``recompute``."""
    return frozenset(node.name for node in graph.nodes if RECOMPUTE in node.tags)


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
