"""Turn scheduled groups into :class:`Kernel` descriptions, deciding which values are stored."""

from __future__ import annotations

import attrs

from torchstrata.core import Graph, Node
from torchstrata.inductor.ir.exprs import Expr, buffers_loaded
from torchstrata.inductor.ir.indexing import linear_offset
from torchstrata.inductor.ir.kernel import BufferArg, Kernel, ReductionSpec, Store
from torchstrata.inductor.schedule.lowering import Lowered, Pointwise, Reduction, StridedView
from torchstrata.inductor.schedule.scheduler import (
    ExternStep,
    Group,
    GroupContext,
    Scheduler,
    buffer_name,
    buffer_strides,
    member_index,
)
from torchstrata.inductor.schedule.shared_values import (
    shared_values,
    stored_anyway,
    with_views_of,
)


@attrs.frozen
class Plan:
    """What the launcher runs: kernels and extern calls in order, and the stored values."""

    steps: tuple[Kernel | ExternStep, ...]
    stored: frozenset[Node]
    lowered: dict[Node, Lowered]

    def view(self, node: Node) -> StridedView | None:
        """How the launcher makes ``node`` without a copy (``as_strided`` of a buffer), or
        None when it is a buffer of its own (stored, an input or an extern result)."""
        lowered = self.lowered.get(node)
        if isinstance(lowered, Pointwise) and lowered.view is not None and node not in self.stored:
            return lowered.view
        return None


def plan_graph(
    graph: Graph,
    lowered: dict[Node, Lowered],
    store_shared: bool = True,
    join_columns: bool = True,
) -> Plan:
    """Schedule ``graph`` and describe every kernel.

    ``join_columns=False`` keeps a column sum out of a group over other reduced dims and
    out of its operand's group (:class:`~.scheduler.Scheduler`).

    Pointwise values shared down a chain are stored (:mod:`.shared_values`; not with
    ``store_shared=False``, which also keeps views of outputs and extern operands
    copies); the plan's ``lowered`` holds the views of them that extern
    calls read without a copy."""
    shared = shared_values(graph, lowered) if store_shared else frozenset()
    if store_shared:
        lowered = with_views_of(graph, lowered, shared | stored_anyway(graph, lowered))
    scheduler = Scheduler(graph, lowered, shared, join_columns)
    steps = scheduler.run()
    built: list[tuple[Group, GroupContext, dict[Node, Expr]]] = []
    stored: set[Node] = set(graph.outputs)
    for step in steps:
        if isinstance(step, ExternStep):
            for operand in step.node.input_nodes():
                stored.add(operand)
                operand_lowered = lowered[operand]
                if isinstance(operand_lowered, Pointwise) and operand_lowered.view is not None:
                    stored.add(operand_lowered.view.base)  # the launcher's view reads it
            continue
        context = GroupContext(scheduler, step, set(step.members))
        exprs = _member_exprs(step, context)
        stored.update(context.loaded)
        built.append((step, context, exprs))
    kernels = iter(
        _kernel(f"kernel{i}", group, context, exprs, stored, lowered)
        for i, (group, context, exprs) in enumerate(built)
    )
    ordered = tuple(step if isinstance(step, ExternStep) else next(kernels) for step in steps)
    realised_stored = frozenset(node for node in stored if node in scheduler.step_of)
    return Plan(ordered, realised_stored, lowered)


def _member_exprs(group: Group, context: GroupContext) -> dict[Node, Expr]:
    """Each member's expression: as the scheduler's joins built them when they built
    every member under the group's final shapes and loop variables (``Group.built``,
    taken over with the context's loads and computed values), else built here."""
    built = group.built
    signature = (
        group.row_shape,
        group.red_shape,
        group.red_first,
        context.row_index,
        context.red_index,
    )
    if built is not None and built.signature == signature and list(built.exprs) == group.members:
        context.loaded.update(built.loaded)
        context.computed.update(dict.fromkeys(built.computed))
        return dict(built.exprs)
    return {member: context.member_expr(member) for member in group.members}


def _kernel(
    name: str,
    group: Group,
    context: GroupContext,
    exprs: dict[Node, Expr],
    stored: set[Node],
    lowered: dict[Node, Lowered],
) -> Kernel:
    reductions: list[ReductionSpec] = []
    row_stores: list[Store] = []
    full_stores: list[Store] = []
    for member, expr in exprs.items():
        meta = member.tensor_meta
        member_lowered = lowered[member]
        if isinstance(member_lowered, Reduction):
            reductions.append(ReductionSpec(member.name, member_lowered.kind, expr, meta.dtype))
            if member not in stored:
                continue
            expr = context.value(member, context.row_index)
        elif member not in stored:
            continue
        placed = member_index(meta.shape, group, context.row_index, context.red_index)
        assert placed is not None, f"%{member.name} does not fit its kernel"
        index, is_full = placed
        offset = linear_offset(index, buffer_strides(member, lowered[member]))
        store = Store(buffer_name(member), offset, expr, meta.dtype)
        (full_stores if is_full else row_stores).append(store)
    args: dict[str, BufferArg] = {}
    loaded_dtypes = {buffer_name(node): node.tensor_meta.dtype for node in context.loaded}
    for expr in [r.body for r in reductions] + [s.value for s in row_stores + full_stores]:
        for buffer in sorted(buffers_loaded(expr)):
            args.setdefault(buffer, BufferArg(buffer, loaded_dtypes[buffer]))
    for store in row_stores + full_stores:
        args.setdefault(store.buffer, BufferArg(store.buffer, store.dtype))
    ops = tuple(dict.fromkeys(str(node.op) for node in context.computed if node.op is not None))
    return Kernel(
        name,
        context.kernel_row_shape,
        group.red_shape,
        tuple(reductions),
        tuple(row_stores),
        tuple(full_stores),
        tuple(args.values()),
        ops,
    )
