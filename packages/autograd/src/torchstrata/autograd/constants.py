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

import attrs
import torch

from torchstrata.autograd.devices import is_available
from torchstrata.core import Graph, Node, map_nodes


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


#: Ops that read a tensor list of indices (their second argument) into their first
#: argument, which may live on another device than the indices: eager indexes a CUDA
#: tensor with CPU indices.
INDEXING_OPS = frozenset(
    {
        "aten.index.Tensor",
        "aten._unsafe_index.Tensor",
        "aten.index_put.default",
        "aten._unsafe_index_put.default",
        "aten._index_put_impl.default",
    }
)


def place_index_constants(
    graph: Graph, num_inputs: int, constants: tuple[torch.Tensor, ...]
) -> tuple[Graph, tuple[torch.Tensor, ...]]:
    """Lifted constants on the CPU that only index tensors on one other device
    (``x_cuda[torch.tensor([0, 2])]``), moved to that device (once, here).

    Eager accepts CPU indices into a CUDA tensor; the compiled graph wants one device
    (``prims.gather`` takes indices on its input's device), and the result is the same.
    A constant read any other way stays where it was made, as does one whose device is
    not available on this machine.

    :param graph: an ATen graph whose inputs ``num_inputs`` on are the ``constants``.
    """
    inputs = graph.inputs[num_inputs : num_inputs + len(constants)]
    uses: dict[Node, set[torch.device | None]] = {node: set() for node in inputs}
    for node in graph.nodes:
        for read in node.input_nodes():
            if read in uses:
                uses[read].add(_indexed_device(node, read))
    for output in graph.outputs:
        if output in uses:
            uses[output].add(None)
    replaced: dict[Node, Node] = {}
    placed = list(constants)
    for position, node in enumerate(inputs):
        devices = uses[node]
        if node.tensor_meta.device.type != "cpu" or len(devices) != 1:
            continue
        (device,) = devices
        if device is None or device.type == "cpu" or not is_available(device):
            continue
        meta = attrs.evolve(node.tensor_meta, device=device)
        replaced[node] = Node(node.name, None, meta=meta)
        placed[position] = constants[position].to(device)
    if not replaced:
        return graph, constants
    return _with_inputs_replaced(graph, replaced), tuple(placed)


def _indexed_device(node: Node, constant: Node) -> torch.device | None:
    """The device of the tensor that ``node`` indexes with ``constant`` when it reads
    ``constant`` only as one of its indices; else None."""
    if node.op is None or node.op.name not in INDEXING_OPS or len(node.args) < 2:
        return None
    source, indices, *rest = node.args
    if source is constant or not isinstance(indices, list | tuple) or constant not in indices:
        return None
    if any(constant in _nodes_in(value) for value in (*rest, *node.kwargs.values())):
        return None
    return source.tensor_meta.device if isinstance(source, Node) else None


def _nodes_in(value: object) -> list[Node]:
    if isinstance(value, Node):
        return [value]
    if isinstance(value, list | tuple):
        return [node for item in value for node in _nodes_in(item)]
    return []


def _with_inputs_replaced(graph: Graph, replaced: dict[Node, Node]) -> Graph:
    """``graph`` with the input nodes in ``replaced`` swapped for their new nodes."""
    env: dict[Node, Node] = {node: replaced.get(node, node) for node in graph.inputs}
    nodes = []
    for node in graph.nodes:
        args = map_nodes(node.args, env.__getitem__)
        kwargs = map_nodes(dict(node.kwargs), env.__getitem__)
        env[node] = Node(node.name, node.op, args, kwargs, node.meta)
        nodes.append(env[node])
    inputs = tuple(env[node] for node in graph.inputs)
    return Graph(graph.level, inputs, tuple(nodes), tuple(env[node] for node in graph.outputs))
