"""Reduction phases, and the max/sum-of-exp pairs that one online loop can compute.

A *phase* is a set of reductions none of which reads another of the same set (grouped by
depth); a looped kernel makes one pass over the row per phase. A sum of ``exp(v - max(v))`` right
after the max of ``v`` needs no pass of its own: an online loop keeps the running max and
rescales the running sum whenever the max grows (softmax, log-softmax, logsumexp).

Likewise a sum of squares about the mean, ``sum((v - sum(v)/n)**2)`` right after ``sum(v)``
(LayerNorm's and ``var``'s centred second moment), needs no pass of its own: a Welford loop
keeps a running mean and second moment per lane and merges the lanes at the end, as robust
as the two-pass form (no cancellation between large sums) with one read of the row.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import torch

from torchstrata.inductor.ir.exprs import Constant, Op, ReduceRef, reductions_used
from torchstrata.inductor.ir.kernel import ReductionSpec


def reduction_phases(reductions: Sequence[ReductionSpec]) -> list[list[ReductionSpec]]:
    """The reductions grouped by depth: a reduction joins the phase after the last phase
    holding a reduction it reads, so none reads another of its own phase and independent
    reductions share the earliest pass (cross-entropy's picked logit joins the max)."""
    phases: list[list[ReductionSpec]] = []
    level: dict[str, int] = {}
    for spec in reductions:
        reads = reductions_used(spec.body)
        depth = max((level[name] + 1 for name in reads if name in level), default=0)
        level[spec.name] = depth
        if depth == len(phases):
            phases.append([])
        phases[depth].append(spec)
    return phases


def online_pairs(
    reductions: Sequence[ReductionSpec], counts: bool = False
) -> dict[str, ReductionSpec]:
    """``{sum name: max spec}`` for sums of ``exp(a - max(a))``: one online pass computes both.

    Only the phase right after the max may hold such a sum, and nothing else in that phase
    may read the max (it is known only after the loop). With ``counts``, counts of the
    row's maxima (:func:`count_of_max`) are partners too, for code generators that keep a
    running count beside the running max.
    """

    def partner(spec: ReductionSpec, before: list[ReductionSpec]) -> ReductionSpec | None:
        maxima = {s.name: s for s in before if s.kind == "amax"}
        found = _exp_of_shifted(spec, maxima)
        if found is None and counts:
            found = count_of_max(spec, maxima)
        return found

    return _whole_phase_pairs(reductions, partner)


def count_of_max(spec: ReductionSpec, maxima: dict[str, ReductionSpec]) -> ReductionSpec | None:
    """The max among ``maxima`` whose ties ``spec`` counts, ``sum(int32(max(v) == v))``
    (``amax``'s backward shares the gradient among the row's maxima), or None.

    An online loop keeps the count beside the running max: it restarts at the tile's
    count when the max grows and adds the tile's count when it stays. A NaN max never
    equals itself (count 0, as the plain sum gives); for a row of ``-inf`` every valid
    element ties, which the code generator sets after the loop (masked lanes are ``-inf``
    too, and the loop counts them)."""
    body = spec.body
    if spec.kind != "sum" or spec.dtype != torch.int32:
        return None
    if not (
        isinstance(body, Op) and body.name == "convert_element_type" and body.dtype == spec.dtype
    ):
        return None
    test = body.args[0]
    if not (isinstance(test, Op) and test.name == "eq"):
        return None
    left, right = test.args
    peak_ref, value = (left, right) if isinstance(left, ReduceRef) else (right, left)
    if not isinstance(peak_ref, ReduceRef):
        return None
    peak = maxima.get(peak_ref.name)
    if peak is None or peak.body != value or not peak.dtype.is_floating_point:
        return None
    return peak if reductions_used(value) == frozenset() else None


def _exp_of_shifted(spec: ReductionSpec, maxima: dict[str, ReductionSpec]) -> ReductionSpec | None:
    body = spec.body
    if spec.kind != "sum" or not (isinstance(body, Op) and body.name == "exp"):
        return None
    inner = body.args[0]
    if not (isinstance(inner, Op) and inner.name == "sub" and isinstance(inner.args[1], ReduceRef)):
        return None
    peak = maxima.get(inner.args[1].name)
    if peak is None or peak.body != inner.args[0] or not peak.dtype.is_floating_point:
        return None
    return peak if reductions_used(inner.args[0]) == frozenset() else None


def variance_pairs(reductions: Sequence[ReductionSpec], length: int) -> dict[str, ReductionSpec]:
    """``{square-sum name: sum spec}`` for ``sum((v - sum(v) / length) ** 2)`` over rows of
    ``length``: one Welford pass computes both.

    As with :func:`online_pairs`, the whole phase after the sum must be such partners.
    """

    def partner(spec: ReductionSpec, before: list[ReductionSpec]) -> ReductionSpec | None:
        return _centred_square(spec, {s.name: s for s in before if s.kind == "sum"}, length)

    return _whole_phase_pairs(reductions, partner)


def _whole_phase_pairs(
    reductions: Sequence[ReductionSpec],
    partner: Callable[[ReductionSpec, list[ReductionSpec]], ReductionSpec | None],
) -> dict[str, ReductionSpec]:
    """``{name: earlier spec}`` where ``partner(spec, previous phase)`` finds the earlier
    reduction whose loop can compute ``spec``, for phases all of whose reductions have one
    (a phase left with one reduction of its own still needs its loop: nothing is gained)."""
    phases = reduction_phases(reductions)
    pairs: dict[str, ReductionSpec] = {}
    for before, after in itertools.pairwise(phases):
        found = {spec.name: partner(spec, before) for spec in after}
        if all(value is not None for value in found.values()):
            pairs.update({name: value for name, value in found.items() if value is not None})
    return pairs


def _centred_square(
    spec: ReductionSpec, sums: dict[str, ReductionSpec], length: int
) -> ReductionSpec | None:
    body = spec.body
    if spec.kind != "sum" or not spec.dtype.is_floating_point:
        return None
    if not (isinstance(body, Op) and body.name == "mul" and body.args[0] == body.args[1]):
        return None
    centred = body.args[0]
    if not (isinstance(centred, Op) and centred.name == "sub"):
        return None
    value, mean = centred.args
    if not (isinstance(mean, Op) and mean.name == "div"):
        return None
    total, count = mean.args
    if not (isinstance(total, ReduceRef) and isinstance(count, Constant)):
        return None
    found = sums.get(total.name)
    if found is None or found.body != value or count.value != length:
        return None
    if found.dtype != spec.dtype or reductions_used(value):
        return None
    return found
