"""Per-row factors taken out of a sum that repeats one already computed.

``sum(c * a, dims)``, with ``c`` constant along ``dims`` (broadcast), is ``c * sum(a, dims)``.
When the graph already computes ``sum(a, dims)``, the rewritten sum is that one (merged by
common-subexpression elimination), and a reduction, one walk over the rows, becomes a
pointwise product of per-row values.

Where this happens: the gradient of ``x - max(x)`` sums the gradient of its other operand
over the row, and under a log-sum-exp that gradient is ``(t / s) * exp(x - max(x))``,
where ``s = sum(exp(x - max(x)))`` is the forward's own sum (a cross-entropy written
out by hand, or any softmax that does not detach its max). The sum needed ``s`` first, so
it was a walk of its own after the statistics.

Chains of ``neg``, ``mul`` and ``div`` by such factors are taken apart (``sum(-(c * a))`` is
``-(c * sum(a))``). Only floating sums are rewritten, and only when ``sum(a, dims)``
exists: then nothing is summed that was not summed before, so no sum can overflow that
did not. The result can differ from the original in the last bits (``c * sum(a)`` rounds
``c * a`` once per row, not once per element), as any reordering of a float sum does.
"""

from __future__ import annotations

from typing import Any

import torch

from torchstrata.core import Graph, GraphBuilder, Node, Transformer, prim
from torchstrata.inductor.passes.one_hot import broadcast_source

_SUM, _MUL, _DIV, _NEG = prim("sum"), prim("mul"), prim("div"), prim("neg")
_BROADCAST, _RESHAPE = prim("broadcast_in_dim"), prim("reshape")

#: A factor: a Python number, or ``(source, dims)``: a node broadcast to the summed
#: operand's shape, its dim ``k`` landing on dim ``dims[k]``.
Factor = int | float | tuple[Node, tuple[int, ...]]


def _factor(value: Any, dims: frozenset[int], dtype: torch.dtype) -> Factor | None:
    """``value`` as a factor constant along ``dims``, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if not isinstance(value, Node) or value.tensor_meta.dtype != dtype:
        return None
    # a chain of broadcasts ends at its source; any other node stands for itself
    found = broadcast_source(value)
    source, source_dims = found or (value, tuple(range(len(value.tensor_meta.shape))))
    shape = source.tensor_meta.shape
    if any(d in dims and shape[k] != 1 for k, d in enumerate(source_dims)):
        return None
    return source, source_dims


Steps = list[tuple[str, Factor | None]]


#: How many ``neg``/``mul``/``div`` deep a sum's operand is taken apart.
MAX_STEPS = 8


def _peelings(
    value: Node, dims: frozenset[int], dtype: torch.dtype, depth: int = MAX_STEPS
) -> list[tuple[Node, Steps]]:
    """Every way to take ``value`` apart into ``(a, steps)``: ``value`` is ``a`` with
    ``steps`` applied in order (innermost first), each ``("neg", None)``, ``("mul", c)``
    or ``("div", c)``; the longest first. A product both of whose operands are constant
    along ``dims`` (size-1 dims) is taken apart both ways."""
    found: list[tuple[Node, Steps]] = []
    if depth == 0:
        pass
    elif not value.is_input and value.op == _NEG and isinstance(value.args[0], Node):
        found += [
            (a, [*steps, ("neg", None)])
            for a, steps in _peelings(value.args[0], dims, dtype, depth - 1)
        ]
    elif not value.is_input and value.op in (_MUL, _DIV):
        left, right = value.args
        kind = "mul" if value.op == _MUL else "div"
        factor = _factor(right, dims, dtype)
        if factor is not None and isinstance(left, Node):
            found += [
                (a, [*steps, (kind, factor)])
                for a, steps in _peelings(left, dims, dtype, depth - 1)
            ]
        factor = _factor(left, dims, dtype) if value.op == _MUL else None
        if factor is not None and isinstance(right, Node):
            found += [
                (a, [*steps, ("mul", factor)])
                for a, steps in _peelings(right, dims, dtype, depth - 1)
            ]
    if value.tensor_meta.dtype == dtype:
        found.append((value, []))
    return found


def _sum_key(node: Node) -> tuple[Node, tuple[int, ...]] | None:
    value, dims = node.args
    if not isinstance(value, Node):
        return None
    rank = len(value.tensor_meta.shape)
    return value, tuple(sorted(d % rank for d in dims)) if rank else tuple(dims)


def _candidate(node: Node, sums: set[tuple[Node, tuple[int, ...]]]) -> tuple[Node, list] | None:
    """``(a, steps)`` when ``node`` is a floating sum of a factored ``a`` whose plain sum
    over the same dims is in ``sums``."""
    if node.op != _SUM or not node.tensor_meta.dtype.is_floating_point:
        return None
    key = _sum_key(node)
    if key is None or not key[1]:
        return None
    value, dims = key
    if value.tensor_meta.dtype != node.tensor_meta.dtype:
        return None
    for base, steps in _peelings(value, frozenset(dims), value.tensor_meta.dtype):
        if steps and (base, dims) in sums:
            return base, steps
    return None


class _FactorSums(Transformer):
    def __init__(self, graph: Graph, sums: set[tuple[Node, tuple[int, ...]]]) -> None:
        super().__init__(graph)
        self.sums = sums

    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        found = _candidate(node, self.sums)
        if found is None:
            return super().transform_node(node, args, kwargs)
        base, steps = found
        b = self.builder
        dims = _sum_key(node)[1]  # type: ignore[index]
        shape = node.tensor_meta.shape
        rank = len(base.tensor_meta.shape)
        kept = [d for d in range(rank) if d not in dims]
        result = b.call(_SUM, self.env[base], list(dims))
        for op, factor in steps:
            if op == "neg":
                result = b.call(_NEG, result)
                continue
            assert factor is not None
            operand = _reduced(b, factor, self.env, kept, shape)
            result = b.call(_MUL if op == "mul" else _DIV, result, operand)
        return result


def _reduced(
    b: GraphBuilder,
    factor: Factor,
    env: dict[Node, Node],
    kept: list[int],
    shape: tuple[int, ...],
) -> Any:
    """``factor`` broadcast to the sum's result ``shape`` (the summed operand's ``kept``
    dims)."""
    if not isinstance(factor, tuple):
        return factor
    source, source_dims = factor
    value = env[source]
    source_shape = source.tensor_meta.shape
    keep = [k for k, d in enumerate(source_dims) if d in kept]
    if len(keep) != len(source_dims):  # size-1 dims along the summed ones: dropped
        value = b.call(_RESHAPE, value, [source_shape[k] for k in keep])
    out_dims = [kept.index(source_dims[k]) for k in keep]
    if [source_shape[k] for k in keep] == list(shape) and out_dims == list(range(len(shape))):
        return value
    return b.call(_BROADCAST, value, list(shape), out_dims)


def factor_sums(graph: Graph) -> Graph:
    """``graph`` with per-row factors taken out of sums whose plain sum it already computes
    (see the module docstring); merge the repeated sums with
    :func:`~torchstrata.core.eliminate_common_subexpressions` afterwards."""
    sums = {key for node in graph.nodes if node.op == _SUM and (key := _sum_key(node))}
    if not any(_candidate(node, sums) for node in graph.nodes):
        return graph
    return _FactorSums(graph, sums).run()
