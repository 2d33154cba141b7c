"""Lifted constants: tensors made inside a graph (``torch.tensor([...])``) as hidden inputs.

The recorder adds a graph input for each constant tensor with elements that the traced
code makes (:meth:`~torchstrata.autograd.AtenRecorder._lift`), in the order it meets
them, after the torch graph's inputs (and after the tangents, in a backward). The
calling convention (:class:`~torchstrata.core.AotResult`) wants them right after the
torch graph's inputs, and only those the graphs read. As torch.compile keeps such
tensors as graph attributes, the caller then passes the same real tensors on every
call: no per-call cost grows with their size.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from torchstrata.core import Graph, Node


def hoist_constants(
    graph: Graph, num_inputs: int, constants: Sequence[tuple[Node, torch.Tensor]]
) -> tuple[Graph, tuple[torch.Tensor, ...]]:
    """``graph`` with its lifted-constant inputs moved right after its first
    ``num_inputs`` inputs (the torch graph's), those no node or output reads dropped,
    and the real tensors of the constants kept, in their new input order.

    :param graph: an ATen graph whose inputs include every node of ``constants``.
    :param num_inputs: how many inputs come first and stay first.
    :param constants: ``(input node, real tensor)`` of each lifted constant.
    """
    if not constants:
        return graph, ()
    read = set(graph.outputs)
    for node in graph.nodes:
        read.update(node.input_nodes())
    lifted = {node for node, _ in constants}
    kept = [(node, tensor) for node, tensor in constants if node in read]
    others = [node for node in graph.inputs if node not in lifted]
    inputs = (*others[:num_inputs], *(node for node, _ in kept), *others[num_inputs:])
    hoisted = Graph(graph.level, inputs, graph.nodes, graph.outputs)
    return hoisted, tuple(tensor for _, tensor in kept)
