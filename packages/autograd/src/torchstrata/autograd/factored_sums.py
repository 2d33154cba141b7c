"""Per-row factors taken out of the backward's sums that repeat a forward sum.

``sum(c * a, dims)``, with ``c`` constant along ``dims``, is ``c * sum(a, dims)``. In the
joint graph the backward's sums can repeat one the forward computes: under a log-sum-exp
written with its max (``log(sum(exp(x - max(x)))) + max(x)``, a cross-entropy spelled out
by hand), the gradient that ``x - max(x)`` sends to the max is
``-sum((t / s) * exp(x - max(x)))``, and ``s = sum(exp(x - max(x)))`` is the forward's
own sum. Rewritten as ``-(t / s) * s``, the backward no longer walks its rows for a
reduction. This has to happen here: once partitioned, the backward receives ``s`` as a
saved input and cannot see what it sums (``torchstrata.inductor``'s ``factored_sums``
does the same for prims graphs, where forward and backward are compiled together).

Chains of ``neg`` and of ``mul``/``div`` by such factors are taken apart. Only floating
sums are rewritten, only when the plain sum (same dims, no dtype argument) comes earlier
in the graph: nothing is summed that was not summed before, so no sum can overflow that
did not. The result can differ from eager in the last bits (``c * sum(a)`` rounds once per
row, not once per element), as any reordering of a float sum does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from torchstrata.autograd.trace import JointTrace
from torchstrata.core import GraphBuilder, Node, Transformer, aten

_SUM = aten("sum.dim_IntList")
_NEG = aten("neg.default")
_MULS = (aten("mul.Tensor"), aten("mul.Scalar"))
_DIVS = (aten("div.Tensor"), aten("div.Scalar"))
_EXPAND = aten("expand.default")
_VIEW = aten("view.default")

#: How many ``neg``/``mul``/``div`` deep a sum's operand is taken apart.
MAX_STEPS = 8

#: A factor: a Python number, or a node that broadcasts (aligned right) against the summed
#: operand with size 1 along the summed dims.
Factor = int | float | Node
Steps = list[tuple[str, Factor | None]]


def _sum_key(node: Node) -> tuple[Node, tuple[int, ...]] | None:
    """``(operand, sorted non-negative dims)`` of a plain floating ``sum.dim_IntList``."""
    if node.op != _SUM or node.kwargs or len(node.args) < 2 or not isinstance(node.args[0], Node):
        return None
    value, dims = node.args[0], node.args[1]
    rank = len(value.tensor_meta.shape)
    if not dims or not rank or not node.tensor_meta.dtype.is_floating_point:
        return None
    if value.tensor_meta.dtype != node.tensor_meta.dtype:
        return None
    return value, tuple(sorted({d % rank for d in dims}))


def _factor(value: Any, dims: tuple[int, ...], like: Node) -> Factor | None:
    """``value`` as a factor of ``like`` constant along ``dims``, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if not isinstance(value, Node) or value.tensor_meta.dtype != like.tensor_meta.dtype:
        return None
    while value.op == _EXPAND and isinstance(value.args[0], Node):  # look through expands
        value = value.args[0]
    rank, shape = len(like.tensor_meta.shape), value.tensor_meta.shape
    if len(shape) > rank:
        return None
    offset = rank - len(shape)
    if any(d >= offset and shape[d - offset] != 1 for d in dims):
        return None
    return value


def _peelings(
    value: Node, dims: tuple[int, ...], depth: int = MAX_STEPS
) -> list[tuple[Node, Steps]]:
    """Every way to take ``value`` apart into ``(a, steps)``: ``value`` is ``a`` with
    ``steps`` applied in order (innermost first); the longest first."""
    found: list[tuple[Node, Steps]] = []
    op, args = value.op, value.args
    if depth == 0 or value.is_input or value.kwargs:
        pass
    elif op == _NEG and isinstance(args[0], Node):
        found += [(a, [*s, ("neg", None)]) for a, s in _peelings(args[0], dims, depth - 1)]
    elif op in _MULS or op in _DIVS:
        left, right = args
        kind = "mul" if op in _MULS else "div"
        factor = _factor(right, dims, value)
        if factor is not None and _same_shape(left, value):
            found += [(a, [*s, (kind, factor)]) for a, s in _peelings(left, dims, depth - 1)]
        factor = _factor(left, dims, value) if kind == "mul" else None
        if factor is not None and _same_shape(right, value):
            found += [(a, [*s, ("mul", factor)]) for a, s in _peelings(right, dims, depth - 1)]
    found.append((value, []))
    return found


def _same_shape(operand: Any, value: Node) -> bool:
    """``operand`` is a node of ``value``'s shape and dtype (no broadcast through it)."""
    if not isinstance(operand, Node):
        return False
    meta, want = operand.tensor_meta, value.tensor_meta
    return meta.shape == want.shape and meta.dtype == want.dtype


def _candidate(
    node: Node, sums: dict[tuple[Node, tuple[int, ...]], Node]
) -> tuple[Node, Steps] | None:
    """``(existing plain sum, steps)`` when ``node`` sums a factored operand whose plain sum
    over the same dims comes before it."""
    key = _sum_key(node)
    if key is None:
        return None
    value, dims = key
    for base, steps in _peelings(value, dims):
        if steps and (base, dims) in sums:
            return sums[(base, dims)], steps
    return None


def _rewrites(nodes: Sequence[Node]) -> dict[Node, tuple[Node, Steps]]:
    """``{sum node: (the earlier plain sum, steps)}`` for every sum to rewrite, in one pass
    (a rewritten sum is not itself a plain sum that later ones may repeat)."""
    sums: dict[tuple[Node, tuple[int, ...]], Node] = {}
    found: dict[Node, tuple[Node, Steps]] = {}
    for node in nodes:
        candidate = _candidate(node, sums)
        if candidate is not None:
            found[node] = candidate
            continue
        key = _sum_key(node)
        if key is not None:
            sums.setdefault(key, node)
    return found


class _FactorSums(Transformer):
    def __init__(self, trace: JointTrace, rewrites: dict[Node, tuple[Node, Steps]]) -> None:
        super().__init__(trace.graph)
        self.rewrites = rewrites

    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        found = self.rewrites.get(node)
        if found is None:
            return super().transform_node(node, args, kwargs)
        existing, steps = found
        b = self.builder
        key = _sum_key(node)
        assert key is not None
        value, dims = key
        kept = [1 if d in dims else n for d, n in enumerate(value.tensor_meta.shape)]
        result = _view(b, self.env[existing], kept)  # the sum with its dims kept, size 1
        for op, factor in steps:
            if op == "neg":
                result = b.call(_NEG, result)
                continue
            operand = self.env[factor] if isinstance(factor, Node) else factor
            number = not isinstance(operand, Node)
            if op == "mul":
                result = b.call(_MULS[1] if number else _MULS[0], result, operand)
            else:
                result = b.call(_DIVS[1] if number else _DIVS[0], result, operand)
        return _view(b, result, list(node.tensor_meta.shape))


def _view(b: GraphBuilder, value: Node, shape: list[int]) -> Node:
    """``value`` viewed as ``shape`` (same elements), unchanged when it has it."""
    if list(value.tensor_meta.shape) == shape:
        return value
    return b.call(_VIEW, value, shape)


def factor_joint_sums(trace: JointTrace) -> JointTrace:
    """``trace`` with per-row factors taken out of sums whose plain sum its graph already
    computes earlier (see the module docstring)."""
    rewrites = _rewrites(trace.graph.nodes)
    if not rewrites:
        return trace
    return attrs.evolve(trace, graph=_FactorSums(trace, rewrites).run())
