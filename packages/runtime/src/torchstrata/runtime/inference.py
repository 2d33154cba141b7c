"""Graphs compiled under ``torch.no_grad()``: nothing in them requires grad.

Capture records ``requires_grad`` as the tensors have it (parameters always do); under
``no_grad`` no output records history, so the runtime hands the later stages a graph
whose metadata says so, and they compile an inference graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import torch

from torchstrata.core import Graph, Node, NodeMeta, TensorMeta, Transformer


def _no_grad_meta(meta: NodeMeta) -> NodeMeta:
    if isinstance(meta, TensorMeta):
        return attrs.evolve(meta, requires_grad=False) if meta.requires_grad else meta
    if isinstance(meta, tuple):
        return tuple(_no_grad_meta(item) for item in meta)  # type: ignore[misc]
    return meta


class _DropRequiresGrad(Transformer):
    def transform_input(self, node: Node) -> Node:
        return self.builder.input(node.name, _no_grad_meta(node.tensor_meta))  # type: ignore[arg-type]

    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        assert node.op is not None
        return self.builder.call(
            node.op, *args, meta=_no_grad_meta(node.meta), name=node.name, **kwargs
        )


def without_requires_grad(graph: Graph) -> Graph:
    """``graph`` with ``requires_grad=False`` on every value (the graph itself if none had it)."""
    if not any(meta.requires_grad for meta in graph.input_metas):
        return graph
    return _DropRequiresGrad(graph).run()


def grad_off(runner: Callable[..., Any]) -> Callable[..., Any]:
    """``runner`` run with grad off, its outputs detached: no output of the graph carries
    a gradient (an output rebuilt as a view of an input that requires grad, made with
    grad off, would still say it requires one)."""

    def run(*inputs: Any) -> tuple[Any, ...]:
        with torch.no_grad():
            outputs = runner(*inputs)
        return tuple(
            value.detach() if isinstance(value, torch.Tensor) and value.requires_grad else value
            for value in outputs
        )

    return run
