"""Reduction phases, and the max/sum-of-exp pairs that one online loop can compute.

A *phase* is a set of reductions none of which reads another of the same set (grouped by
depth); a looped kernel makes one pass over the row per phase. A sum of ``exp(v - max(v))`` right
after the max of ``v`` needs no pass of its own: an online loop keeps the running max and
rescales the running sum whenever the max grows (softmax, log-softmax, logsumexp).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from torchstrata.inductor.exprs import Op, ReduceRef, reductions_used
from torchstrata.inductor.kernel import ReductionSpec


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


def online_pairs(reductions: Sequence[ReductionSpec]) -> dict[str, ReductionSpec]:
    """``{sum name: max spec}`` for sums of ``exp(a - max(a))``: one online pass computes both.

    Only the phase right after the max may hold such a sum, and nothing else in that phase
    may read the max (it is known only after the loop).
    """
    phases = reduction_phases(reductions)
    pairs: dict[str, ReductionSpec] = {}
    for before, after in itertools.pairwise(phases):
        maxima = {spec.name: spec for spec in before if spec.kind == "amax"}
        found = {}
        for spec in after:
            peak = _exp_of_shifted(spec, maxima)
            if peak is not None:
                found[spec.name] = peak
            elif reductions_used(spec.body) & set(maxima):
                found = {}
                break
        if found and all(spec.name in found for spec in after):
            pairs.update(found)
    return pairs


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
