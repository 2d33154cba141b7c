"""Unit gradients: a scalar loss's gradients computed in the forward, for a tangent of 1.

A backward is linear in its tangents. When a graph has one differentiable output and it
is a scalar (a loss), every gradient is ``t * g`` where ``t`` is the incoming gradient
and ``g`` the gradient for ``t = 1``. The forward can compute ``g`` while it has the
inputs in hand, in the kernels that already walk them: for a cross-entropy over bf16
logits the forward reads the logits once and writes ``g``, where a forward that saves the
logits leaves the backward to read them again and write the gradient (three passes of the
logits' size against two). The backward then scales ``g`` by ``t`` in place, which costs
nothing when ``t`` is 1, as ``loss.backward()`` seeds it (Liger-Kernel's fused
cross-entropy does the same).

The forward keeps its usual saved values too, so the ordinary backward graph stays right
for every other call: a second backward through a retained graph, a double backward.
Gradients involving matmuls or convolutions are not moved: they cost compute, not
traffic, and a forward run without a backward would pay for them. A tangent other than 1
costs a pass over ``g`` that the ordinary backward would not; the runtime then runs the
forward without ``g`` (``torchstrata.runtime.unit_grads``), the AotResult's forward with
its last ``num_unit_grads`` outputs dropped.

Off with ``CompileOptions(autograd=AutogradOptions(unit_grads=False))``
(``AutogradOptions.from_env()`` reads ``TORCHSTRATA_UNIT_GRADS``).
"""

from __future__ import annotations

import math

from torchstrata.autograd.partition import Partition, ancestors, fresh_name
from torchstrata.autograd.python_calls import calls_python
from torchstrata.autograd.trace import JointTrace
from torchstrata.core import CompileOptions, Graph, Level, Node, aten, map_nodes

#: Compute-bound ops (by short name): gradients that need one stay in the backward, as do
#: those needing any op whose name contains "conv" or "attention".
_COMPUTE_BOUND = frozenset(
    {"mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "linear", "mv", "addmv", "dot"}
    | {"vdot", "einsum", "tensordot", "addr", "outer", "ger"}
)


def unit_grads_enabled(options: CompileOptions | None) -> bool:
    """False when ``options.autograd.unit_grads`` is False (``AutogradOptions``; the
    untyped stage option ``unit_grads`` is still honoured)."""
    if options is None:
        return True
    return options.autograd.unit_grads and bool(options.stage("autograd").get("unit_grads", True))


def unit_grad_forward(trace: JointTrace, parts: Partition) -> Graph | None:
    """``parts.forward`` with the gradients for a unit tangent appended to its outputs
    (after the saved values, one per ``trace.grad_inputs`` entry); None when the graph's
    one tangent is not a floating scalar or a gradient needs a compute-bound op."""
    joint = trace.graph
    tangents = joint.inputs[trace.num_primals :]
    if len(tangents) != 1:
        return None
    tangent = tangents[0]
    meta = tangent.tensor_meta
    if math.prod(meta.shape) != 1 or not meta.dtype.is_floating_point:
        return None
    dependent = _tangent_dependent(joint, tangent)
    if any(_compute_bound(node) or calls_python(node) for node in dependent):
        return None  # a Python call (a gradient hook) runs in the backward only
    names = {node.name for node in joint.all_nodes()} | {n.name for n in parts.forward.nodes}
    one = Node(
        fresh_name(f"{tangent.name}_unit", names),
        aten("full.default"),
        (list(meta.shape), 1.0),
        {"dtype": meta.dtype, "device": meta.device, "pin_memory": False},
        meta,
    )
    env: dict[Node, Node] = {tangent: one}
    copies: list[Node] = []
    for node in joint.nodes:
        if node in dependent:
            copy = Node(
                fresh_name(f"{node.name}_unit", names),
                node.op,
                map_nodes(node.args, lambda arg: env.get(arg, arg)),
                map_nodes(dict(node.kwargs), lambda arg: env.get(arg, arg)),
                node.meta,
            )
            env[node] = copy
            copies.append(copy)
    grads = [env.get(grad, grad) for grad in joint.outputs[trace.num_forward_outputs :]]
    kept = set(parts.forward.nodes)
    read = {arg for copy in copies for arg in copy.input_nodes()} | set(grads)
    needed = ancestors(read - set(copies) - {one}, set(joint.inputs))
    extra = [node for node in joint.nodes if node in needed and node not in kept]
    nodes = (*_merge(joint, parts.forward.nodes, extra), one, *copies)
    return Graph(Level.ATEN, parts.forward.inputs, nodes, (*parts.forward.outputs, *grads))


def _tangent_dependent(joint: Graph, tangent: Node) -> set[Node]:
    dependent = {tangent}
    for node in joint.nodes:
        if any(arg in dependent for arg in node.input_nodes()):
            dependent.add(node)
    dependent.discard(tangent)
    return dependent


def _compute_bound(node: Node) -> bool:
    if node.op is None:
        return False
    name = node.op.short_name
    return name in _COMPUTE_BOUND or "conv" in name or "attention" in name


def _merge(joint: Graph, forward: tuple[Node, ...], extra: list[Node]) -> list[Node]:
    """The forward's nodes with ``extra`` joint nodes, in joint order (the forward's own
    additions, clones of mutated inputs, stay after the joint's nodes)."""
    if not extra:
        return list(forward)
    joined = set(forward) | set(extra)
    ordered = [node for node in joint.nodes if node in joined]
    in_joint = set(joint.nodes)
    return ordered + [node for node in forward if node not in in_joint]
