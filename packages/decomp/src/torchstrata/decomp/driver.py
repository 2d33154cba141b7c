"""``decompose(graph)``: one driver that applies a rule table to an ATen graph."""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

import attrs

from torchstrata.core import (
    COMPLEX_REASON,
    GETITEM,
    NO_CONTRACT,
    CompileOptions,
    Graph,
    GraphBuilder,
    GraphContract,
    Level,
    MetaInferenceError,
    Node,
    OpKind,
    TensorMeta,
    eliminate_dead_code,
    get_prim,
    is_dense,
    map_nodes,
    same_layout,
    touches_complex,
)
from torchstrata.decomp.context import DecompContext, exact_copy
from torchstrata.decomp.defaults import DEFAULT_RULES, is_extern_by_policy
from torchstrata.decomp.layouts import eager_layout, same_operand_layouts, traced_strides
from torchstrata.decomp.table import NotDecomposable, Rule, RuleFn, RuleTable

#: Key of this stage in ``CompileOptions.stage_options``.
STAGE = "decomp"


@attrs.frozen
class DecompStats:
    """What :func:`decompose_with_stats` did, counted per ATen overload.

    ``decomposed``: nodes lowered to prims. ``extern``: ATen nodes kept (by policy, by
    request, because no rule exists, because the rule declined these arguments, or
    because they touch complex values, which prims do not compute).
    """

    decomposed: collections.Counter[str] = attrs.field(factory=collections.Counter)
    extern: collections.Counter[str] = attrs.field(factory=collections.Counter)
    #: Why an extern op was kept, where that is not a missing or declining rule
    #: (``COMPLEX_REASON`` for an op that touches complex values).
    reasons: dict[str, str] = attrs.field(factory=dict)

    def missing(self) -> collections.Counter[str]:
        """Extern ops that are not extern by policy (candidates for new rules)."""
        return collections.Counter(
            {
                op: n
                for op, n in self.extern.items()
                if not is_extern_by_policy(op) and op not in self.reasons
            }
        )


def _as_table(rules: Mapping[str, RuleFn | Rule] | None) -> RuleTable:
    if rules is None:
        return DEFAULT_RULES
    return rules if isinstance(rules, RuleTable) else RuleTable(rules, source="explicit")


def _keep_extern(options: CompileOptions | None) -> frozenset[str]:
    if options is None:
        return frozenset()
    return frozenset(options.stage(STAGE).get("keep_extern", ()))


class _Renames:
    """Gives the value a rule produced the name of the ATen node it replaces.

    Prims a rule builds are named ``<node>_<prim>``; its result takes ``<node>`` back so a
    decomposed listing keeps the names of its source (unless that name is taken).
    """

    def __init__(self) -> None:
        self.wanted: dict[Node, str] = {}

    def claim(self, node: Node, name: str) -> None:
        if node.op is not None and node.name.startswith(f"{name}_") and node not in self.wanted:
            self.wanted[node] = name

    def apply(self, graph: Graph) -> Graph:
        taken = {node.name for node in graph.all_nodes()}
        renamed: dict[Node, Node] = {}
        nodes = []
        for node in graph.nodes:
            name = self.wanted.get(node)
            if name is not None and name not in taken:
                taken.add(name)
            else:
                name = node.name
            args = map_nodes(node.args, lambda n: renamed.get(n, n))
            kwargs = map_nodes(dict(node.kwargs), lambda n: renamed.get(n, n))
            renamed[node] = Node(name, node.op, args, kwargs, node.meta)
            nodes.append(renamed[node])
        outputs = tuple(renamed.get(node, node) for node in graph.outputs)
        return Graph(graph.level, graph.inputs, tuple(nodes), outputs)


def _copy_extern(
    builder: GraphBuilder, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Node:
    """``node`` kept as an ATen call, its metadata re-inferred from the new inputs (they
    may have other strides) on meta tensors, falling back to the ATen graph's.

    Where its operands kept their layouts, each result keeps the ATen graph's strides:
    those were traced on the inputs' device (a channels-last convolution's result is
    channels-last on CPU and CUDA, row-major on the meta device, and the launcher would
    copy every result into that layout)."""
    assert node.op is not None
    try:
        meta = builder.infer(node.op, args, kwargs)
    except MetaInferenceError:
        return builder.call(node.op, *args, meta=node.meta, name=node.name, **kwargs)
    if same_operand_layouts(node, args, kwargs):
        meta = traced_strides(meta, node.meta)
    return builder.call(node.op, *args, meta=meta, name=node.name, **kwargs)


def decompose_with_stats(
    graph: Graph,
    options: CompileOptions | None = None,
    *,
    rules: Mapping[str, RuleFn | Rule] | None = None,
    contract: GraphContract = NO_CONTRACT,
) -> tuple[Graph, DecompStats]:
    """Lower an ATen-level ``graph`` to a prims-level graph and count what happened.

    :param graph: an ATen graph (a prims graph is returned unchanged, apart from its
        inputs' layouts).
    :param options: compile options; ``options.stage_options["decomp"]["keep_extern"]``
        lists overloads (``"aten.gelu.default"``) to keep as ATen even if a rule exists.
    :param rules: the rule table (default :data:`DEFAULT_RULES`; the plugin passes the
        table merged from every plugin's ``torchstrata_decompositions``).
    :param contract: what the caller promises: its first ``user_outputs`` outputs go to
        the user (they get eager's layouts), its inputs come in ``input_layouts`` (the
        graph is built for them).
    :return: the prims graph (extern ATen nodes allowed) and :class:`DecompStats`.
    """
    graph = contract.laid_out(graph)
    if graph.level is Level.PRIMS:
        return graph, DecompStats()
    if graph.level is not Level.ATEN:
        raise ValueError(f"decompose takes an aten graph, got a {graph.level.value} graph")
    table, keep = _as_table(rules), _keep_extern(options)
    stats = DecompStats()
    builder = GraphBuilder(Level.PRIMS)
    env: dict[Node, Any] = {}
    input_aliases: set[Node] = set()
    names = _Renames()
    for node in graph.inputs:
        env[node] = builder.input(node.name, node.tensor_meta)
        input_aliases.add(env[node])
    for node in graph.nodes:
        assert node.op is not None
        args = map_nodes(node.args, env.__getitem__)
        kwargs = map_nodes(dict(node.kwargs), env.__getitem__)
        if node.op == GETITEM and isinstance(args[0], tuple):
            env[node] = args[0][args[1]]
            names.claim(env[node], node.name)
            continue
        if node.op.kind is not OpKind.ATEN:
            env[node] = builder.call(node.op, *args, meta=node.meta, name=node.name, **kwargs)
            continue
        name = node.op.name
        result = None
        if touches_complex(node):  # prims are real-valued: complex stays ATen
            stats.reasons[name] = COMPLEX_REASON
        elif name in table and name not in keep:
            built = len(builder)
            try:
                result = table[name](DecompContext(builder, node, input_aliases), *args, **kwargs)
            except NotDecomposable:
                result = None
            if len(builder) > built:
                result = eager_layout(builder, node, result, built)
        if result is None:
            env[node] = _copy_extern(builder, node, args, kwargs)
            stats.extern[name] += 1
        else:
            env[node] = result
            stats.decomposed[name] += 1
            if isinstance(result, Node):
                names.claim(result, node.name)
    outputs = _distinct_outputs(builder, graph.outputs, env, contract.user_outputs, input_aliases)
    return names.apply(eliminate_dead_code(builder.build(outputs))), stats


def _distinct_outputs(
    builder: GraphBuilder,
    aten_outputs: tuple[Node, ...],
    env: dict[Node, Any],
    user: int,
    input_aliases: set[Node],
) -> list[Any]:
    """The prims graph's outputs, with a copy

    * where two different ATen outputs that are not views lowered to one value (``return
      y, y.clone()``: the clone of a fresh value is the identity). Eager returns two
      tensors there; one storage for both would let an update of one show in the other;
    * for each of the first ``user`` outputs (those the user gets) that eager returns as
      a fresh tensor and a rule lowered to a graph input or a view of one (``roll`` by 0,
      ``slice_scatter`` of nothing): the user's update of it must not show in the input;
    * for each of the first ``user`` outputs that a rule built as a view, not of an input,
      in another layout than eager's dense one: batch norm over a transposed ``[N, C, L]``,
      computed channel-last and permuted back; ``stack``; an ATen view of an intermediate
      (``squeeze`` of the 2-D pool that ``avg_pool1d`` calls, ``view`` of the column-major
      result of ``linalg_inv``), which ``prims.reshape`` lays out row-major. Eager's
      own view of an input comes back as one (the runtime rebuilds it from the input).

    The copy usually fuses into the kernel that computes the value (an output that is a
    view of a buffer is stored by a copy anyway)."""
    first: dict[Node, Node] = {}
    outputs = []
    for position, node in enumerate(aten_outputs):
        value = env[node]
        owner = first.setdefault(value, node) if isinstance(value, Node) else node
        shared = owner is not node and not _is_view(node) and not _is_view(owner)
        if shared or (position < user and _needs_own_copy(node, value, input_aliases)):
            built = len(builder)
            copy = exact_copy(builder, value, f"{node.name}_copy")
            value = eager_layout(builder, node, copy, built)
        outputs.append(value)
    return outputs


def _needs_own_copy(node: Node, value: Any, input_aliases: set[Node]) -> bool:
    """Whether the user's output ``value``, lowered from ATen ``node``, must be copied to be
    the tensor eager returns: a graph input's memory where eager makes a fresh tensor, or
    a prims view (not of an input) whose layout is not the dense one eager gives ``node``."""
    if node.op is None:
        return False
    if value in input_aliases:
        return not _is_view(node)
    return _relaid_view(node, value)


def _relaid_view(node: Node, value: Any) -> bool:
    """Whether ``value``, lowered from ATen ``node``, is a prims view whose layout is not
    the dense one eager gives ``node``."""
    if not isinstance(value, Node) or value.op is None:
        return False
    if (
        value.op.kind is not OpKind.PRIMS
        or get_prim(value.op.name.removeprefix("prims.")).any_dense_layout
    ):
        return False
    want, have = node.meta, value.meta
    return (
        isinstance(want, TensorMeta)
        and isinstance(have, TensorMeta)
        and want.shape == have.shape
        and is_dense(want.shape, want.strides)
        and not same_layout(want.shape, want.strides, have.strides)
    )


def _is_view(node: Node) -> bool:
    """Whether ATen ``node`` returns a view of an argument (an output of ``split`` too);
    a graph input is its own storage, so it counts as one (it is never copied)."""
    if node.op == GETITEM and isinstance(node.args[0], Node):
        return _is_view(node.args[0])
    return node.op is None or node.op.is_view


def decompose(
    graph: Graph,
    options: CompileOptions | None = None,
    *,
    rules: Mapping[str, RuleFn | Rule] | None = None,
    contract: GraphContract = NO_CONTRACT,
) -> Graph:
    """Lower an ATen-level ``graph`` to prims (see :func:`decompose_with_stats`)."""
    return decompose_with_stats(graph, options, rules=rules, contract=contract)[0]
