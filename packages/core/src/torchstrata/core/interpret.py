"""``interpret(graph, *args)``: run any graph eagerly through torch. The oracle of every test."""

from __future__ import annotations

from typing import Any

import torch

from torchstrata.core.graph import Graph, Node, map_nodes
from torchstrata.core.meta import TensorMeta


class InterpreterError(RuntimeError):
    """A node failed while interpreting; the message names it."""


def interpret(graph: Graph, *args: Any) -> tuple[Any, ...]:
    """Evaluate ``graph`` on real tensors and return its outputs as a tuple."""
    if len(args) != len(graph.inputs):
        raise TypeError(f"graph takes {len(graph.inputs)} inputs, got {len(args)}")
    env: dict[Node, Any] = dict(zip(graph.inputs, args, strict=True))
    release = _last_uses(graph)
    for node in graph.nodes:
        assert node.op is not None
        fn = node.op.resolve()
        call_args = map_nodes(node.args, env.__getitem__)
        call_kwargs = map_nodes(dict(node.kwargs), env.__getitem__)
        try:
            env[node] = fn(*call_args, **call_kwargs)
        except Exception as error:
            raise InterpreterError(f"%{node.name} = {node.op.name}(...) failed: {error}") from error
        del call_args, call_kwargs
        for dead in release.get(node, ()):
            del env[dead]  # free intermediates at their last use: peak memory like eager's
    return tuple(env[output] for output in graph.outputs)


def _last_uses(graph: Graph) -> dict[Node, list[Node]]:
    """For each node, the intermediate values whose last reader it is (outputs and inputs
    stay alive: the caller owns them)."""
    keep = set(graph.outputs) | set(graph.inputs)
    last: dict[Node, Node] = {}
    for node in graph.nodes:
        for arg in node.input_nodes():
            last[arg] = node
    release: dict[Node, list[Node]] = {}
    for value, reader in last.items():
        if value not in keep:
            release.setdefault(reader, []).append(value)
    for node in graph.nodes:  # values nobody reads die at once
        if node not in last and node not in keep:
            release.setdefault(node, []).append(node)
    return release


def random_inputs(graph: Graph, *, seed: int = 0) -> list[torch.Tensor]:
    """Random tensors matching ``graph``'s input metadata (sizes, strides, dtype, device)."""
    generator = torch.Generator().manual_seed(seed)
    return [random_tensor(meta, generator) for meta in graph.input_metas]


def random_tensor(meta: TensorMeta, generator: torch.Generator) -> torch.Tensor:
    """A random tensor in ``meta``'s layout (its whole storage filled, then viewed with
    ``meta``'s sizes and strides), drawn from ``generator``: normal floats, small ints."""
    storage_size = (
        1
        + sum(
            (size - 1) * stride
            for size, stride in zip(meta.shape, meta.strides, strict=True)
            if size > 0
        )
        if meta.numel
        else 0
    )
    if meta.dtype.is_floating_point:
        flat = torch.randn(storage_size, generator=generator, dtype=torch.float64).to(meta.dtype)
    elif meta.dtype is torch.bool:
        flat = torch.randint(0, 2, (storage_size,), generator=generator).bool()
    else:
        flat = torch.randint(-8, 9, (storage_size,), generator=generator).to(meta.dtype)
    tensor = flat.to(meta.device).as_strided(meta.shape, meta.strides)
    return tensor.requires_grad_(meta.requires_grad) if meta.requires_grad else tensor
