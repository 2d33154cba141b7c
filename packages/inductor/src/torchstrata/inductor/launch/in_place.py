"""Write-backs done in place: a functional update of an input that is written back into it.

Functionalization turns a static KV cache's ``cache.index_copy_(dim, pos, k)`` into
``new = index_copy(cache, dim, pos, k)``, returns ``new`` as the cache's write-back, and
the runtime copies it into ``cache`` after the call: the whole cache is copied twice per
step where eager writes one row. When the runtime says which outputs it writes back into
which inputs (the ``write_backs`` of its :class:`~torchstrata.core.GraphContract`),
an extern update whose result is such a write-back runs as its in-place form on the input
itself, so the write-back copies a tensor onto itself (a no-op).

That is only done when nothing after the update reads the input's old value: no later
kernel or extern call reads the input (or a view of it), the update's other operands are
not views of it, and the graph does not return the input itself. Inputs that share memory
would see the update where the functional graph did not; eager sees it too.

An update of a buffer of the graph's own (one a kernel stored, or the fresh result of a
matmul) runs in place too, under the same conditions, when the buffer is not an output
and no output is a view of it: a tied embedding's gradient, ``scatter_add(mm, ...)``
(:mod:`~torchstrata.inductor.passes.scatter_sums`), accumulates into the head's half
instead of copying 4 MB first. The launcher never reuses a buffer for another value, so
a buffer updated in place is only ever the update's result from then on.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from torchstrata.core import Graph, Node, aten, prim
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.lowering import Extern, InputBuffer
from torchstrata.inductor.schedule.plan import Plan
from torchstrata.inductor.schedule.scheduler import ExternStep, buffer_name

#: Functional updates and their in-place forms (same arguments, the first updated).
IN_PLACE = {
    aten("index_copy.default"): aten("index_copy_.default"),
    aten("index_put.default"): aten("index_put_.default"),
    prim("scatter_add"): aten("scatter_add_.default"),
    aten("index_add.default"): aten("index_add_.default"),
}

#: Extern ops whose result is a new tensor, never a view of an operand.
FRESH_RESULTS = frozenset(
    aten(name) for name in ("mm", "addmm", "bmm", "baddbmm", "convolution", "index_add")
) | frozenset(prim(name) for name in ("scatter", "scatter_add"))


def in_place_updates(
    graph: Graph, plan: Plan, write_backs: Mapping[int, int] | None
) -> dict[Node, torch._ops.OpOverload]:
    """``{extern node: its in-place op}`` for the updates that can run in place."""
    write_backs = write_backs or {}
    written = {
        node: graph.inputs[write_backs[j]]
        for j, node in enumerate(graph.outputs)
        if j in write_backs and 0 <= write_backs[j] < len(graph.inputs)
    }
    returned = {_base(node, plan) for node in graph.outputs}
    found: dict[Node, torch._ops.OpOverload] = {}
    for position, step in enumerate(plan.steps):
        if not isinstance(step, ExternStep):
            continue
        node = step.node
        op = IN_PLACE.get(node.op) if node.op is not None else None
        if op is None:
            continue
        target = node.args[0] if node.args else None
        if not isinstance(target, Node):
            continue
        if written.get(node) is not target and not _own_buffer(target, plan, returned):
            continue
        if target in graph.outputs or node.kwargs:
            continue
        others = [arg for arg in node.input_nodes() if arg is not target]
        if any(_base(arg, plan) is target for arg in others):
            continue
        later = plan.steps[position + 1 :]
        if any(buffer_name(target) in _reads(later_step, plan) for later_step in later):
            continue
        found[node] = op.resolve()  # type: ignore[assignment]
    return found


def _own_buffer(target: Node, plan: Plan, returned: set[Node]) -> bool:
    """True when ``target`` is a buffer of the graph's own that no output shows: stored by
    a kernel or a fresh extern result, not an input, not a view, not returned."""
    if target in returned or plan.view(target) is not None:
        return False
    lowered = plan.lowered.get(target)
    if lowered is None or isinstance(lowered, InputBuffer):
        return False
    if isinstance(lowered, Extern):
        return not lowered.allocate_only and target.op in FRESH_RESULTS
    return True


def _base(node: Node, plan: Plan) -> Node:
    """The buffer ``node`` reads: its own, or the base of the view it is."""
    view = plan.view(node)
    return node if view is None else view.base


def _reads(step: Kernel | ExternStep, plan: Plan) -> set[str]:
    """The buffers ``step`` reads."""
    if isinstance(step, Kernel):
        return {arg.name for arg in step.args}
    return {buffer_name(_base(arg, plan)) for arg in step.node.input_nodes()}
