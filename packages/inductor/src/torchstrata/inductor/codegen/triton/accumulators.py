"""The accumulators of a looped Triton reduction whose loop computes a partner with it:
online max with its sums of ``exp(v - max)`` or counts of maxima (per row, or per group of
a thread's consecutive elements), and a sum with its Welford centred second moment. Each
builder returns the loop's (inits, body, finals) lines; the loop itself is
:func:`~torchstrata.inductor.codegen.triton.generate._looped_phase`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torchstrata.inductor.codegen.triton.printer import compute_type, reduce_text, statistic_exp
from torchstrata.inductor.ir.kernel import ReductionSpec, reduction_identity
from torchstrata.inductor.ir.online import count_of_max

Lines = list[str]


def online(
    spec: ReductionSpec,
    masked: str,
    sums: Sequence[ReductionSpec],
    interpret: bool,
    group: int,
    length: int | str | None,
) -> tuple[Lines, Lines, Lines]:
    """Online max and sums of ``exp(v - max)`` (inits, loop body, finals).

    Per row (``group`` 0): each iteration reduces the tile's max and its sums of
    exponentials, the running sums are rescaled by one exp per row when the max grows (one
    exp per element); a running count of maxima (``amax``'s backward) restarts when the
    max grows. Per group (:func:`online_grouped`): no reduction across threads
    inside the loop.
    """
    m, ctype = spec.name, compute_type(spec.dtype)
    if group:
        return online_grouped(spec, masked, sums, interpret, group, length)
    inits = [f"acc_{m} = tl.full([XBLOCK, 1], {identity_text(spec)}, {ctype})"]
    tile_max = reduce_text(spec, f"val_{m}", interpret)
    updates = [
        f"val_{m} = {masked}",
        f"new_{m} = _ts_max(acc_{m}, {tile_max})",
        f"safe_{m} = tl.where(new_{m} == float('-inf'), 0.0, new_{m})",
        f"scale_{m} = {statistic_exp(f'acc_{m} - safe_{m}', spec.dtype)}",
        f"term_{m} = {statistic_exp(f'val_{m} - safe_{m}', spec.dtype)}",
    ]
    finals = [f"red_{m} = acc_{m}"]
    for partner in sums:
        s = partner.name
        inits.append(f"acc_{s} = tl.full([XBLOCK, 1], 0, {compute_type(partner.dtype)})")
        if count_of_max(partner, {m: spec}):
            ties = reduce_text(partner, f"(val_{m} == new_{m}).to(tl.int32)", interpret)
            updates.append(f"acc_{s} = tl.where(new_{m} == acc_{m}, acc_{s}, 0) + {ties}")
            finals.append(f"red_{s} = {_all_tied(m, s, length)}")
            continue
        tile = reduce_text(partner, f"term_{m}", interpret)
        updates.append(f"acc_{s} = acc_{s} * scale_{m} + {tile}")
        finals.append(f"red_{s} = {_undefined_if_all_minus_inf(m, f'acc_{s}', length)}")
    return inits, [*updates, f"acc_{m} = new_{m}"], finals


def _undefined_if_all_minus_inf(m: str, total: str, length: int | str | None) -> str:
    """The online sum ``total``, or NaN for a row whose max is ``-inf``: there every term
    is ``exp(-inf - -inf)``, NaN, as the plain sum (and eager) computes it; the loop's
    safe shift made them 0. Not for a chunk of a row (``length`` None): its sum is merged
    with the other chunks' as it is."""
    if length is None:
        return total
    return f"tl.where(red_{m} == float('-inf'), float('nan'), {total})"


def _all_tied(m: str, s: str, length: int | str | None) -> str:
    """The count of maxima ``acc_{s}``, or the row's ``length`` when its max is ``-inf``
    (every element ties; the loop also counted the masked lanes, which are ``-inf``)."""
    assert length is not None, "counts of maxima are not merged across a cluster's chunks"
    return f"tl.where(red_{m} == float('-inf'), {length}, acc_{s})"


def online_grouped(
    spec: ReductionSpec,
    masked: str,
    sums: Sequence[ReductionSpec],
    interpret: bool,
    group: int,
    length: int | str | None,
) -> tuple[Lines, Lines, Lines]:
    """Online max and sums kept per group of ``group`` consecutive elements of the tile.

    The tile is reshaped to ``[XBLOCK, RBLOCK // group, group]``; a group lies within one
    thread (loads are vectors of 8 bf16 or 4 float32), so its max and sum need no shuffle
    and no barrier, and the loop's warps stream independently. The running sums are
    rescaled by one exp per group; the groups are merged once, after the loop. On the
    H200, cross-entropy's row kernel over [4096, 128256] bf16 ran at 100% of copy against
    86% per row (bench/results/2026-11-30-h200-online-groups.txt).
    """
    m, ctype = spec.name, compute_type(spec.dtype)
    width = f"RBLOCK // {group}"
    inits = [f"acc_{m} = tl.full([XBLOCK, {width}], {identity_text(spec)}, {ctype})"]
    updates = [
        f"val_{m} = tl.reshape({masked}, [XBLOCK, {width}, {group}])",
        f"new_{m} = _ts_max(acc_{m}, {reduce_text(spec, f'val_{m}', interpret, axis=2)})",
        f"safe_{m} = tl.where(new_{m} == float('-inf'), 0.0, new_{m})",
        f"scale_{m} = {statistic_exp(f'acc_{m} - safe_{m}', spec.dtype)}",
        f"term_{m} = {statistic_exp(f'val_{m} - safe_{m}[:, :, None]', spec.dtype)}",
    ]
    finals = [
        f"red_{m} = {reduce_text(spec, f'acc_{m}', interpret)}",
        f"rsafe_{m} = tl.where(red_{m} == float('-inf'), 0.0, red_{m})",
    ]
    for partner in sums:
        s = partner.name
        inits.append(f"acc_{s} = tl.full([XBLOCK, {width}], 0, {compute_type(partner.dtype)})")
        if count_of_max(partner, {m: spec}):
            ties = f"(val_{m} == new_{m}[:, :, None]).to(tl.int32)"
            ties = reduce_text(partner, ties, interpret, axis=2)
            updates.append(f"acc_{s} = tl.where(new_{m} == acc_{m}, acc_{s}, 0) + {ties}")
            mine = f"tl.where(acc_{m} == red_{m}, acc_{s}, 0)"
            finals.append(f"acc_{s} = {reduce_text(partner, mine, interpret)}")
            finals.append(f"red_{s} = {_all_tied(m, s, length)}")
            continue
        tile = reduce_text(partner, f"term_{m}", interpret, axis=2)
        updates.append(f"acc_{s} = acc_{s} * scale_{m} + {tile}")
        rescaled = f"acc_{s} * {statistic_exp(f'acc_{m} - rsafe_{m}', spec.dtype)}"
        total = reduce_text(partner, rescaled, interpret)
        finals.append(f"red_{s} = {_undefined_if_all_minus_inf(m, total, length)}")
    return inits, [*updates, f"acc_{m} = new_{m}"], finals


def welford(
    spec: ReductionSpec,
    masked: str,
    squares: Sequence[ReductionSpec],
    interpret: bool,
    even_length: int | str | None,
) -> tuple[Lines, Lines, Lines]:
    """The sum ``spec`` and, in the same loop, its centred sums of squares (inits, loop
    body, finals): a Welford running mean and second moment per lane, merged across the
    lanes at the end (Chan's formula). The sum itself is still accumulated directly, so
    the mean is the same as without the partner.

    Each lane works on its values minus its first value (the shift): with a large mean
    and a small spread, a running mean near the mean itself would be rounded to the
    mean's ulp at every step, which is of the order of the spread.

    When ``RBLOCK`` divides the row (of ``even_length``) every lane holds the same count,
    so the update divides by a scalar (``1 / (k + 1)`` at the ``k``-th tile) instead of
    per lane.
    """
    s, ctype = spec.name, compute_type(spec.dtype)
    tile = "[XBLOCK, RBLOCK]"
    inits = [
        f"acc_{s} = tl.full({tile}, 0, {ctype})",
        f"wk_{s} = tl.full({tile}, 0, {ctype})",
        f"wmean_{s} = tl.full({tile}, 0, {ctype})",
        f"wm2_{s} = tl.full({tile}, 0, {ctype})",
    ]
    updates = [
        f"val_{s} = {masked}",
        f"acc_{s} = acc_{s} + val_{s}",
        f"wk_{s} = tl.where(roffset == 0, val_{s}, wk_{s})",
        f"wv_{s} = val_{s} - wk_{s}",
    ]
    if even_length is not None:
        updates += [f"wstep_{s} = 1.0 / (roffset // RBLOCK + 1)"]
        count = f"tl.full({tile}, {even_length} // RBLOCK, {ctype})"
    else:
        inits.append(f"wn_{s} = tl.full({tile}, 0, {ctype})")
        updates += [
            f"wn_{s} = wn_{s} + tl.where(xmask & rmask, 1.0, 0.0)",
            f"wstep_{s} = tl.where(xmask & rmask, 1.0 / tl.maximum(wn_{s}, 1.0), 0.0)",
        ]
        count = f"wn_{s}"
    updates += [
        f"delta_{s} = wv_{s} - wmean_{s}",
        f"wmean_{s} = wmean_{s} + delta_{s} * wstep_{s}",
        f"wm2_{s} = wm2_{s} + tl.where(xmask & rmask, delta_{s} * (wv_{s} - wmean_{s}), 0.0)",
    ]
    state = f"(wk_{s}, wmean_{s}, wm2_{s}, {count})"
    merged = f"tl.reduce({state}, 1, _ts_welford_combine, keep_dims=True)"
    finals = [
        f"red_{s} = {reduce_text(spec, f'acc_{s}', interpret)}",
        f"wk_{s}, wmean_{s}, wm2_{s}, wn_{s} = {merged}",
    ]
    finals += [f"red_{square.name} = wm2_{s}" for square in squares]
    return inits, updates, finals


def identity_text(spec: ReductionSpec) -> str:
    value = reduction_identity(spec.kind, spec.dtype)
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        return f'float("{value}")'
    return repr(value)
