"""``saved_activation_report``: bytes the backward keeps, ours against eager autograd's."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch

from torchstrata.autograd.aot import aot
from torchstrata.core import AotResult, Graph, interpret


@attrs.frozen
class SavedActivationReport:
    """Bytes saved for the backward by eager autograd and by the partitioned graphs.

    ``*_bytes`` count every saved tensor; ``*_activation_bytes`` leave out graph inputs
    (weights, the batch). Eager counts each saved storage once; ours counts each saved
    value once.
    """

    eager_bytes: int
    compiled_bytes: int
    eager_activation_bytes: int
    compiled_activation_bytes: int
    eager_tensors: int
    compiled_tensors: int


def eager_saved_bytes(graph: Graph, inputs: Sequence[torch.Tensor]) -> tuple[int, int, int]:
    """``(bytes, bytes excluding inputs, count)`` of the tensors eager autograd saves
    while running ``graph`` (torch level) on ``inputs``, through ``saved_tensors_hooks``.

    Inputs are copied (so graph mutations do not reach them) and get ``requires_grad``
    from the graph's input metadata.
    """
    leaves = [
        tensor.detach().clone().requires_grad_(node.tensor_meta.requires_grad)
        for tensor, node in zip(inputs, graph.inputs, strict=True)
    ]
    input_storages = {tensor.untyped_storage().data_ptr() for tensor in leaves}
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        interpret(graph, *leaves)
    total = sum(storages.values())
    activations = sum(size for ptr, size in storages.items() if ptr not in input_storages)
    return total, activations, len(storages)


def compiled_saved_bytes(result: AotResult) -> tuple[int, int, int]:
    """``(bytes, bytes excluding inputs, count)`` of the values ``result.forward`` saves."""
    if result.backward is None:
        return 0, 0, 0
    start = result.num_user_outputs + result.num_mutations
    saved = list(dict.fromkeys(result.forward.outputs[start:]))
    inputs = set(result.forward.inputs)
    total = sum(node.tensor_meta.nbytes for node in saved)
    activations = sum(node.tensor_meta.nbytes for node in saved if node not in inputs)
    return total, activations, len(saved)


def saved_activation_report(graph: Graph, inputs: Sequence[torch.Tensor]) -> SavedActivationReport:
    """Compare the bytes saved for the backward by eager autograd and by :func:`aot`."""
    eager = eager_saved_bytes(graph, inputs)
    ours = compiled_saved_bytes(aot(graph))
    return SavedActivationReport(
        eager_bytes=eager[0],
        compiled_bytes=ours[0],
        eager_activation_bytes=eager[1],
        compiled_activation_bytes=ours[1],
        eager_tensors=eager[2],
        compiled_tensors=ours[2],
    )
