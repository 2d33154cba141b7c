"""FX interop: ``from_fx`` brings ``torch.fx`` graphs in, ``to_fx`` takes ours out."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from torchstrata.core.builder import GraphBuilder
from torchstrata.core.fx_indexing import TensorIndexError, index_tensor, tensor_attribute
from torchstrata.core.graph import Graph, Node, map_nodes
from torchstrata.core.meta import TensorMeta
from torchstrata.core.ops import GETITEM, Level, OpKind, OpRef, aten_from_overload, torch_op

#: ``getattr(tensor, name)`` in Dynamo's graphs (``x.T``): a torch-level view op.
_GETATTR = OpRef(OpKind.TORCH, "builtins.getattr")


class FxImportError(ValueError):
    """An FX node has no counterpart in the torchstrata IR; the message names it."""


def _op_for_target(node: torch.fx.Node) -> OpRef:
    target = node.target
    if node.op == "call_method":
        assert isinstance(target, str)
        if not hasattr(torch.Tensor, target):
            raise FxImportError(f"FX node {node.name}: Tensor has no method {target!r}")
        return OpRef(OpKind.TORCH, f"torch.Tensor.{target}")
    if isinstance(target, torch._ops.OpOverload):
        return aten_from_overload(target)
    if isinstance(target, torch._ops.OpOverloadPacket):
        return aten_from_overload(target.default)
    if target is operator.getitem:
        return GETITEM
    if target is getattr:
        return _GETATTR
    op = torch_op(target)  # type: ignore[arg-type]
    if op is None:
        raise FxImportError(f"FX node {node.name}: {target!r} is not a public torch callable")
    return op


def _indexes_a_tensor(node: torch.fx.Node) -> bool:
    """Whether ``node`` (an ``operator.getitem``) subscripts a tensor, as its recorded
    value says (Dynamo's ``example_value``, ``val``), or a placeholder (a tensor here)."""
    source = node.args[0]
    if not isinstance(source, torch.fx.Node):
        return False
    value = source.meta.get("val", source.meta.get("example_value"))
    return source.op == "placeholder" or isinstance(value, torch.Tensor)


def _input_meta(node: torch.fx.Node, example: Any) -> TensorMeta:
    value = node.meta.get("val", example)
    if isinstance(value, torch.Tensor):
        return TensorMeta.from_tensor(value)
    raise FxImportError(f"FX placeholder {node.name} has no tensor metadata; pass example inputs")


def from_fx(module: torch.fx.GraphModule, example_inputs: Sequence[Any] | None = None) -> Graph:
    """Convert an FX graph (from ``torch.fx.symbolic_trace``, ``make_fx``, Dynamo or
    ``torch.export``) to a :class:`Graph`.

    The level is ``aten`` when every call is an ATen overload, ``torch`` otherwise.
    Placeholders take metadata from ``node.meta['val']`` or from ``example_inputs``.
    """
    fx_nodes = list(module.graph.nodes)
    calls = [n for n in fx_nodes if n.op in ("call_function", "call_method")]
    ops = {n: _op_for_target(n) for n in calls}
    level = (
        Level.ATEN
        if all(op.kind in (OpKind.ATEN, OpKind.BUILTIN) for op in ops.values())
        and not any(_indexes_a_tensor(node) for node, op in ops.items() if op is GETITEM)
        else Level.TORCH
    )
    builder = GraphBuilder(level)
    env: dict[torch.fx.Node, Any] = {}
    placeholders = [n for n in fx_nodes if n.op == "placeholder"]
    examples = list(example_inputs) if example_inputs is not None else [None] * len(placeholders)
    if len(examples) != len(placeholders):
        raise FxImportError(f"{len(placeholders)} placeholders but {len(examples)} example inputs")
    outputs: list[Node] = []
    for fx_node in fx_nodes:
        if fx_node.op == "placeholder":
            env[fx_node] = builder.input(fx_node.name, _input_meta(fx_node, examples.pop(0)))
        elif fx_node.op in ("call_function", "call_method"):
            args = torch.fx.node.map_arg(fx_node.args, env.__getitem__)
            kwargs = torch.fx.node.map_arg(fx_node.kwargs, env.__getitem__)
            if ops[fx_node] is GETITEM and isinstance(args[0].meta, TensorMeta):
                env[fx_node] = _index_tensor(builder, fx_node, args)
                continue
            if ops[fx_node] is _GETATTR:
                env[fx_node] = _tensor_attribute(builder, fx_node, args)
                continue
            env[fx_node] = builder.call(ops[fx_node], *args, name=fx_node.name, **kwargs)
        elif fx_node.op == "output":
            flat = torch.fx.node.map_arg(fx_node.args[0], env.__getitem__)
            outputs = list(flat) if isinstance(flat, list | tuple) else [flat]
        else:
            raise FxImportError(
                f"FX node {fx_node.name}: {fx_node.op} is not supported (lift attributes "
                "to inputs first)"
            )
    if not all(isinstance(out, Node) for out in outputs):
        raise FxImportError("FX graph returns something other than tensors")
    return builder.build(outputs)


def _index_tensor(builder: GraphBuilder, fx_node: torch.fx.Node, args: Any) -> Node:
    """``tensor[index]`` (Dynamo's ``operator.getitem`` on a tensor) as view ops."""
    if builder.level is not Level.TORCH:
        raise FxImportError(f"FX node {fx_node.name}: a tensor subscript in an ATen graph")
    source, index = args
    try:
        return index_tensor(builder, source, index, fx_node.name)
    except TensorIndexError as error:
        raise FxImportError(f"FX node {fx_node.name}: {error}") from None


def _tensor_attribute(builder: GraphBuilder, fx_node: torch.fx.Node, args: Any) -> Node:
    """``getattr(tensor, name)`` (Dynamo's ``x.T``) as a view op."""
    if len(args) != 2 or not isinstance(args[0], Node) or not isinstance(args[0].meta, TensorMeta):
        raise FxImportError(f"FX node {fx_node.name}: getattr of something other than a tensor")
    source, name = args
    try:
        return tensor_attribute(builder, source, name, fx_node.name)
    except TensorIndexError as error:
        raise FxImportError(f"FX node {fx_node.name}: {error}") from None


def to_fx(graph: Graph) -> torch.fx.GraphModule:
    """A ``GraphModule`` that computes what ``graph`` computes (prims call their
    reference implementations), for inspection with familiar tools."""
    fx_graph = torch.fx.Graph()
    env: dict[Node, torch.fx.Node] = {}
    for node in graph.inputs:
        placeholder = fx_graph.placeholder(node.name)
        placeholder.meta["tensor_meta"] = node.meta
        env[node] = placeholder
    for node in graph.nodes:
        assert node.op is not None
        target = node.op.resolve()
        args = map_nodes(node.args, env.__getitem__)
        kwargs = map_nodes(dict(node.kwargs), env.__getitem__)
        env[node] = fx_graph.call_function(target, tuple(args), kwargs, name=node.name)
        env[node].meta["torchstrata_op"] = node.op.name
    fx_graph.output(tuple(env[output] for output in graph.outputs))
    return torch.fx.GraphModule(torch.nn.Module(), fx_graph)
