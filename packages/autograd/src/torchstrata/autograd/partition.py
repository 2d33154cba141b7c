"""Splitting a joint forward+backward graph into a forward and a backward graph.

The choice of what the forward saves for the backward is a minimum cut (the idea of
AOTAutograd's rematerialising partitioner). Each joint node ``v`` becomes two flow
vertices ``v.in → v.out`` joined by an edge whose capacity is the bytes of ``v``'s value;
reading ``v`` is an infinite edge ``v.out → u.in``. The source feeds the primal inputs
and every node that reads no tangent and may not be recomputed (matmuls, reductions,
RNG...), even one that only the backward needs; tangent-dependent nodes drain into the
sink. A minimum cut then picks the cheapest set of values to save: cheap ops (pointwise,
views, copies) on the sink side of the cut are recomputed in the backward instead of
being saved. Nodes of a checkpointed region (:mod:`torchstrata.autograd.recompute`) are
neither fed by the source nor ever cut: the backward recomputes them, matmuls included.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs
import torch

from torchstrata.autograd.materialised import materialised_values
from torchstrata.autograd.recompute import lazy_order, must_recompute
from torchstrata.autograd.trace import JointTrace
from torchstrata.core import GETITEM, Graph, Level, Node, aten, map_nodes, size_hint

if TYPE_CHECKING:
    import networkx as nx  # type: ignore[import-untyped]

#: Cheap non-pointwise ops that the backward may recompute rather than load.
_CHEAP_OPS = frozenset(
    {
        "clone",
        "_to_copy",
        "copy",
        "expand",
        "full",
        "full_like",
        "zeros",
        "zeros_like",
        "ones",
        "ones_like",
        "empty_like",
        "scalar_tensor",
        "arange",  # a factory too: an index vector (cross-entropy's) is not worth saving
        "fill",
        "select_scatter",
        "slice_scatter",
        "diagonal_scatter",
        "cat",
        "constant_pad_nd",
        # a view in all but its schema (a bias-less linear's 3-D result): saving it rather
        # than the matmul it reshapes made the forward copy a tied head's 4 MB of logits
        "_unsafe_view",
    }
)


#: Non-recomputable ops whose results the inductor reads where they are used (gathers
#: lowered pointwise) rather than writing them: no discount for those (see choose_saved).
_GATHER_OPS = frozenset({"embedding", "index", "index_select", "gather", "take"})


def writes_result(node: Node) -> bool:
    """True for a node whose result the forward writes whether saved or not: a matmul,
    reduction or other op that may not be recomputed, draws no random numbers and is no
    gather (those are read in the kernels that use them)."""
    if node.op is None or is_random(node) or is_recomputable(node):
        return False
    return _overload(node)._overloadpacket.__name__ not in _GATHER_OPS


#: The cut counts a saved primal input or user output at this fraction of its bytes (see
#: choose_saved).
PRIMAL_DISCOUNT = 0.5

#: The name in ``CompileOptions.blocked_plugins`` that prices a matmul's or reduction's
#: result at its full bytes, like a pointwise value's (for measuring the discount).
RESULT_DISCOUNT = "autograd.result_discount"


@attrs.frozen
class Partition:
    """The two graphs and the joint nodes the forward saves (in backward input order)."""

    forward: Graph
    backward: Graph
    saved: tuple[Node, ...]


def _overload(node: Node) -> torch._ops.OpOverload:
    assert node.op is not None
    overload: torch._ops.OpOverload = node.op.resolve()  # type: ignore[assignment]
    return overload


def is_random(node: Node) -> bool:
    """True for ops that draw random numbers (their results must be computed once)."""
    if node.op is None or node.op == GETITEM:
        return False
    return torch.Tag.nondeterministic_seeded in _overload(node).tags


def is_recomputable(node: Node) -> bool:
    """True for ops cheap enough to recompute in the backward: pointwise ops, views,
    ``getitem``, copies and factories. Matmuls, reductions and RNG ops are not (softmax is
    spelled out before partitioning, see :mod:`torchstrata.autograd.expand`)."""
    if node.op is None:
        return False
    if node.op == GETITEM:
        return True
    func = _overload(node)
    if torch.Tag.nondeterministic_seeded in func.tags:
        return False
    if torch.Tag.pointwise in func.tags:
        return True
    if any(ret.alias_info is not None for ret in func._schema.returns):
        return True  # a view
    return func._overloadpacket.__name__ in _CHEAP_OPS


def _weight(node: Node) -> float:
    """The bytes of ``node``'s value; a symbolic size counts at its hint (the trace's
    size), with no condition recorded: what is saved is a choice of speed, and any cut
    is right at every size (decision 0280)."""
    meta = node.meta
    if hasattr(meta, "nbytes") and not isinstance(meta, tuple):
        return float(size_hint(meta.nbytes))  # type: ignore[union-attr]
    return math.inf


def _is_view(node: Node) -> bool:
    if node.op is None:
        return False
    if node.op == GETITEM:
        return True  # an item of a view op's list (``split``); else of a multi-output op
    return any(ret.alias_info is not None for ret in _overload(node)._schema.returns)


def views_of_written_inputs(trace: JointTrace) -> set[Node]:
    """The joint nodes that view (share memory with) an input the forward writes back
    to, not the input itself: saved, such a view would show the input's new value to the
    backward, which needs the old one (decision 0520). The partition saves the input
    (as a clone) or a value computed from the view instead."""
    primals = trace.graph.inputs[: trace.num_primals]
    aliased = {primals[index] for index in trace.mutated_inputs}
    views: set[Node] = set()
    if not aliased:
        return views
    for node in trace.graph.nodes:
        base = node.args[0] if node.args else None
        if isinstance(base, Node) and base in aliased and _is_view(node):
            aliased.add(node)
            views.add(node)
    return views


def ancestors(roots: Iterable[Node], stop: set[Node]) -> set[Node]:
    """``roots`` and every node they read, not looking past the nodes in ``stop``."""
    seen: set[Node] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node not in stop:
            stack.extend(node.input_nodes())
    return seen


def choose_saved(
    trace: JointTrace, discount_results: bool = True, save_materialised: bool = True
) -> list[Node]:
    """The joint nodes the forward saves, chosen by a minimum cut (in joint order).

    ``discount_results``: price the result of a matmul or reduction, which the forward
    writes anyway, like a primal input (at :data:`PRIMAL_DISCOUNT`).
    ``save_materialised``: a pointwise value that a forward matmul, convolution or
    attention reads (:mod:`.materialised`) is priced the same way and never recomputed."""
    joint = trace.graph
    primals = set(joint.inputs[: trace.num_primals])
    tangents = set(joint.inputs[trace.num_primals :])
    grads = joint.outputs[trace.num_forward_outputs :]
    # the caller holds these anyway (write-backs are copied into inputs: not these)
    held = primals | set(joint.outputs[: trace.num_user_outputs])
    recomputed = must_recompute(joint, trace.recompute, held, is_random)
    tangent_dependent = set(tangents)
    for node in joint.nodes:
        if any(arg in tangent_dependent for arg in node.input_nodes()):
            tangent_dependent.add(node)
    users = joint.users()
    unsaveable = views_of_written_inputs(trace)
    materialised: set[Node] = set()
    if save_materialised:
        forward = {node for node in joint.all_nodes() if node not in tangent_dependent}
        recomputable = {node for node in joint.nodes if is_recomputable(node)}
        materialised = materialised_values(
            joint, users, forward, recomputable, writes_result, recomputed
        )
    # networkx costs 0.2 s to import; only training graphs reach the min cut, so inference
    # compiles never pay for it.
    import networkx as nx

    flow = nx.DiGraph()
    flow.add_nodes_from(["source", "sink"])
    for node in joint.all_nodes():
        vin, vout = (node.name, "in"), (node.name, "out")
        if node in tangent_dependent:
            flow.add_edge(vin, "sink")
            continue
        # a reduction (or matmul) that reads no tangent runs in the forward even when only
        # the backward needs it: there it shares the forward's walk over its input, where
        # in the backward it would walk that input again (amax's count of maxima)
        forced = node in primals or is_random(node) or not is_recomputable(node)
        forced = forced or node.name in trace.region_outputs or node in materialised
        if forced and node not in recomputed:
            flow.add_edge("source", vin)
        if node in grads:
            flow.add_edge(vout, "sink")
        weight = _weight(node)
        if node in held or (discount_results and writes_result(node)) or node in materialised:
            # Saving an input or a returned value writes nothing more in the forward and
            # usually keeps nothing alive that the caller does not hold anyway: half the
            # price of saving a value of the same size (an fp32 log-softmax is recomputed
            # from its fp32 logits; a returned residual sum ``h = x + dropout(r)`` is
            # saved once rather than ``x`` and ``r``, read again to recompute it). The
            # result of a matmul or reduction is written by the forward anyway, where a
            # pointwise value may be fused into its readers and never stored: a tied
            # head's logits and two row statistics are saved rather than a log-softmax
            # of the logits' size, which the forward would write only to be saved. So
            # is a pointwise value that a matmul reads (the forward stores it), and it is
            # never recomputed: the backward would write it again.
            weight *= PRIMAL_DISCOUNT
        if math.isinf(weight) or node in recomputed or node in unsaveable:
            flow.add_edge(vin, vout)
        else:
            flow.add_edge(vin, vout, capacity=weight)
        for user in users[node]:
            flow.add_edge(vout, (user.name, "in"))
    reachable = _source_side(flow)
    return [
        node
        for node in joint.all_nodes()
        if (node.name, "in") in reachable and (node.name, "out") not in reachable
    ]


def _source_side(flow: nx.DiGraph) -> set[object]:
    """Vertices reachable from the source in the residual network of a maximum flow.

    Of all minimum cuts this is the one nearest the source, so ties go to saving
    earlier values (a primal input rather than a view of it) and recomputing more.
    That set is the same for every maximum flow, so the algorithm only decides the
    time: on the joint graph of a 24-layer GPT (4307 vertices) Boykov-Kolmogorov takes
    0.8 s where Edmonds-Karp, one breadth-first search per augmenting path (about one
    per saved value), took 13.8 s: a time that grew with the square of the depth.
    """
    from networkx.algorithms.flow import boykov_kolmogorov  # type: ignore[import-untyped]

    residual = boykov_kolmogorov(flow, "source", "sink")
    reachable: set[object] = {"source"}
    stack: list[object] = ["source"]
    while stack:
        vertex = stack.pop()
        for successor, data in residual[vertex].items():
            if successor not in reachable and data["flow"] < data["capacity"]:
                reachable.add(successor)
                stack.append(successor)
    return reachable


def partition(
    trace: JointTrace,
    saved: list[Node] | None = None,
    discount_results: bool = True,
    save_materialised: bool = True,
) -> Partition:
    """Split ``trace.graph`` into forward and backward graphs around the saved values.

    Forward: the primal inputs → user outputs, write-backs, saved values. Backward:
    saved values, then tangents → gradients. A saved primal input that the forward also
    writes back to is saved as a clone (the write-back would change it otherwise).
    ``discount_results`` and ``save_materialised`` go to :func:`choose_saved` when
    ``saved`` is None.
    """
    joint = trace.graph
    if saved is None:
        saved = choose_saved(trace, discount_results, save_materialised)
    primals = joint.inputs[: trace.num_primals]
    tangents = joint.inputs[trace.num_primals :]
    names = {node.name for node in joint.all_nodes()}
    mutated = {primals[index] for index in trace.mutated_inputs}
    forward_saved: list[Node] = []
    clones: list[Node] = []
    for node in saved:
        if node in mutated:
            name = fresh_name(f"{node.name}_saved", names)
            clone = Node(name, aten("clone.default"), (node,), {}, node.meta)
            clones.append(clone)
            forward_saved.append(clone)
        else:
            forward_saved.append(node)
    forward_outputs = (*joint.outputs[: trace.num_forward_outputs], *forward_saved)
    forward_live = ancestors(forward_outputs, set(primals))
    if forward_live & set(tangents):
        raise AssertionError("partition: the forward graph reads a tangent")
    forward_nodes = tuple(node for node in joint.nodes if node in forward_live) + tuple(clones)
    forward = Graph(Level.ATEN, primals, forward_nodes, forward_outputs)
    grads = joint.outputs[trace.num_forward_outputs :]
    backward = _backward_graph(joint, saved, tangents, grads, lazy=bool(trace.recompute))
    return Partition(forward=forward, backward=backward, saved=tuple(saved))


def _backward_graph(
    joint: Graph,
    saved: list[Node],
    tangents: tuple[Node, ...],
    grads: tuple[Node, ...],
    lazy: bool = False,
) -> Graph:
    """The backward graph: ``saved`` and ``tangents`` in, ``grads`` out. ``lazy``: the
    values it recomputes come just before their first use (a checkpointed region's, see
    :func:`~torchstrata.autograd.recompute.lazy_order`), else in joint order."""
    stop = set(saved) | set(tangents)
    live = ancestors(grads, stop)
    leaked = [node for node in live if node.is_input and node not in stop]
    if leaked:
        names = ", ".join(f"%{node.name}" for node in leaked)
        raise AssertionError(f"partition: the backward reads primal inputs {names} unsaved")
    env: dict[Node, Node] = {}
    inputs: list[Node] = []
    for node in saved:
        meta = attrs.evolve(node.tensor_meta, requires_grad=False)
        placeholder = Node(node.name, None, meta=meta)
        env[node] = placeholder
        inputs.append(placeholder)
    for node in tangents:
        env[node] = node
        inputs.append(node)
    nodes: list[Node] = []
    order = [node for node in joint.nodes if node in live and node not in stop]
    if lazy:
        reads_tangent = set(tangents)
        for node in order:
            if any(arg in reads_tangent for arg in node.input_nodes()):
                reads_tangent.add(node)
        order = lazy_order(order, reads_tangent)
    for node in order:
        copy = Node(
            node.name,
            node.op,
            map_nodes(node.args, env.__getitem__),
            map_nodes(dict(node.kwargs), env.__getitem__),
            node.meta,
        )
        env[node] = copy
        nodes.append(copy)
    return Graph(Level.ATEN, tuple(inputs), tuple(nodes), tuple(env[grad] for grad in grads))


def fresh_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base_1``, ``base_2``... : the first not in ``taken`` (then added)."""
    name, counter = base, 1
    while name in taken:
        name, counter = f"{base}_{counter}", counter + 1
    taken.add(name)
    return name
