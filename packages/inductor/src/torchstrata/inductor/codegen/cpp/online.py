"""Chunked online max and sums of ``exp(v - max)`` for long rows (C++ backend).

Softmax, log-softmax and cross-entropy reduce a row to its max, then to the sum of
``exp(v - max)``. A row longer than the row cache holds (beyond L1) is then read twice
more from L2 or memory. Here the row is walked in chunks that fit L1: a chunk's max (and
any other reduction of the max's phase), then the chunk's sum of ``exp(v - running max)``
(its second read hits L1). When the max grows, the running sum is rescaled: one exp per
element plus two per chunk, and one pass over the row instead of two.

The pairs come from :func:`~torchstrata.inductor.ir.online.online_pairs`. Special values
match the two-pass loops: a NaN anywhere makes the max and the sums NaN; a row of
``-inf`` has max ``-inf`` and sums NaN (``exp(-inf - -inf)``); a ``+inf`` makes the sums
NaN (``exp(inf - inf)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torchstrata.inductor.codegen.cpp.exprs import (
    COMBINE,
    compute_type,
    exp_call,
    literal,
)
from torchstrata.inductor.codegen.cpp.sum_loops import (
    LANE_BLOCK,
    SUM_BLOCK,
    SUM_LANES,
    accumulator_type,
    lane_total,
)
from torchstrata.inductor.codegen.emitter import ExprEmitter
from torchstrata.inductor.codegen.row_cache import MAX_ROW_LENGTH
from torchstrata.inductor.codegen.size_names import number
from torchstrata.inductor.ir.indexing import Var
from torchstrata.inductor.ir.kernel import ReductionSpec, reduction_identity

#: Bytes of compute-type values per chunk: two chunks of loads stay in a 32 KiB L1.
CHUNK_BYTES = 8192
_OMP_REDUCTION = {"sum": "+", "prod": "*", "amax": "max", "amin": "min"}


def wants_online(row_length: int, inner_vars: Sequence[Var]) -> bool:
    """Chunked online loops pay off for rows the row cache does not hold (one reduced dim).

    Shorter rows stay in L1 between the two loops, where the plain loops (one exp per
    element, exps cached for the store loop) are faster; row caches and online loops
    therefore never meet in one kernel.
    """
    return len(inner_vars) == 1 and row_length > MAX_ROW_LENGTH


def _ctype_of(spec: ReductionSpec) -> str:
    return compute_type(spec.dtype)


def _limits(spec: ReductionSpec) -> tuple[str, str]:
    ctype = _ctype_of(spec)
    return f"static_cast<{ctype}>(-INFINITY)", f"static_cast<{ctype}>(NAN)"


def online_phase(
    emitter: ExprEmitter,
    phase: Sequence[ReductionSpec],
    partners: Mapping[str, Sequence[ReductionSpec]],
    var: Var,
) -> list[str]:
    """The chunked loop for ``phase`` and the sums paired with its maxima.

    ``partners`` maps a max of ``phase`` to its sums of ``exp(body - max)``; the other
    reductions of ``phase`` accumulate in the first inner loop of each chunk. Defines
    ``red_<name>`` for every reduction of the phase and every partner.
    """
    wide = any(compute_type(spec.dtype) == "double" for spec in phase)
    chunk = CHUNK_BYTES // (8 if wide else 4)
    length, r = number(var.size), var.name  # the row length: ``red_len`` (decision 0285)
    inits: list[str] = []
    first_updates: list[str] = []
    clauses: list[str] = []
    merges: list[str] = []
    finals: list[str] = []
    paired = [spec for spec in phase if partners.get(spec.name)]
    emitter.open_inner()
    chunk_inits: list[str] = []
    for spec in phase:
        ctype, acc = _ctype_of(spec), f"acc_{spec.name}"
        value = emitter.emit(spec.body)
        if spec in paired:
            low, nan = _limits(spec)
            m = spec.name
            inits += [f"{ctype} {acc} = {low};", f"int32_t nan_{m} = 0;"]
            chunk_inits += [f"{ctype} chunk_{m} = {low};", f"int32_t chunk_nan_{m} = 0;"]
            clauses += [f"reduction(max:chunk_{m})", f"reduction(|:chunk_nan_{m})"]
            first_updates += [
                f"chunk_{m} = ts_max(chunk_{m}, {value});",
                f"chunk_nan_{m} |= static_cast<int32_t>({value} != {value});",
            ]
            merges += [
                f"nan_{m} |= chunk_nan_{m};",
                f"const {ctype} new_{m} = ts_max({acc}, chunk_{m});",
                f"const {ctype} safe_{m} = new_{m} == {low} ? static_cast<{ctype}>(0) : new_{m};",
            ]
            finals.append(f"const {ctype} red_{m} = (nan_{m} ? {nan} : {acc});")
            continue
        identity = literal(reduction_identity(spec.kind, spec.dtype), spec.dtype)
        inits.append(f"{ctype} {acc} = {identity};")
        clauses.append(f"reduction({_OMP_REDUCTION[spec.kind]}:{acc})")
        first_updates.append(
            f"{acc} = static_cast<{ctype}>({COMBINE[spec.kind].format(acc=acc, v=value)});"
        )
        result = acc
        if spec.kind in ("amax", "amin") and spec.dtype.is_floating_point:
            inits.append(f"int32_t nan_{spec.name} = 0;")
            clauses.append(f"reduction(|:nan_{spec.name})")
            first_updates.append(f"nan_{spec.name} |= static_cast<int32_t>({value} != {value});")
            result = f"(nan_{spec.name} ? static_cast<{ctype}>(NAN) : {acc})"
        finals.append(f"const {ctype} red_{spec.name} = {result};")
    first = emitter.close_inner() + first_updates
    emitter.open_inner()
    second_updates: list[str] = []
    rescales: list[str] = []
    sum_clauses: list[str] = []
    blocked_sums: list[str] = []  # float32 sums added in blocks of SUM_BLOCK (float) to a double
    block_inits: list[str] = []
    flushes: list[str] = []
    lane_totals: list[str] = []
    # Every sum float32 (double accumulators): lane arrays, as in generate._lane_phase.
    in_lanes = all(
        accumulator_type(p.dtype, p.kind) != _ctype_of(p)
        for spec in paired
        for p in partners[spec.name]
    )
    lane = f"{r}_lane"
    for spec in paired:
        m, ctype = spec.name, _ctype_of(spec)
        low, _ = _limits(spec)
        value = emitter.emit(spec.body)
        for partner in partners[spec.name]:
            s, stype = partner.name, _ctype_of(partner)
            atype = accumulator_type(partner.dtype, partner.kind)
            zero = f"static_cast<{stype}>(0)"
            inits.append(f"{atype} acc_{s} = {zero};")
            if not in_lanes:
                chunk_inits.append(f"{atype} chunk_{s} = {zero};")
            term = exp_call(f"static_cast<{ctype}>({value} - safe_{m})", ctype)
            if in_lanes:
                blocked_sums.append(s)
                chunk_inits.append(f"alignas(64) {atype} part_{s}[{SUM_LANES}] = {{}};")
                block_inits.append(f"block_{s}[{lane}] = {zero};")
                inits.append(f"alignas(64) {stype} block_{s}[{SUM_LANES}];")
                second_updates.append(
                    f"block_{s}[{lane}] = static_cast<{stype}>(block_{s}[{lane}] + {term});"
                )
                flushes.append(
                    f"part_{s}[{lane}] = part_{s}[{lane}] + static_cast<{atype}>(block_{s}[{lane}]);"
                )
                lane_totals += lane_total(f"part_{s}", f"chunk_{s}", atype, lane)
            elif atype == stype:
                sum_clauses.append(f"reduction(+:chunk_{s})")
                second_updates.append(f"chunk_{s} = static_cast<{stype}>(chunk_{s} + {term});")
            else:  # blocks of float lanes, added to the chunk's wide sum
                blocked_sums.append(s)
                sum_clauses.append(f"reduction(+:block_{s})")
                block_inits.append(f"{stype} block_{s} = {zero};")
                second_updates.append(f"block_{s} = static_cast<{stype}>(block_{s} + {term});")
                flushes.append(f"chunk_{s} = chunk_{s} + static_cast<{atype}>(block_{s});")
            scale = exp_call(f"static_cast<{ctype}>(acc_{m} - safe_{m})", ctype)
            rescales.append(f"acc_{s} = static_cast<{atype}>(acc_{s} * {scale} + chunk_{s});")
            # Every element -inf: the two-pass sum is exp(-inf - -inf) = NaN, not 0.
            result = f"acc_{s}" if atype == stype else f"static_cast<{stype}>(acc_{s})"
            finals.append(
                f"const {stype} red_{s} = (acc_{m} == {low} && !nan_{m}) "
                f"? static_cast<{stype}>(NAN) : {result};"
            )
        rescales.append(f"acc_{m} = new_{m};")
    second = emitter.close_inner() + second_updates
    start, stop = f"{r}_start", f"{r}_stop"
    header = f"for (int64_t {r} = {start}; {r} < {stop}; ++{r}) {{"
    body = [
        f"const int64_t {stop} = {start} + {chunk} < {length} ? {start} + {chunk} : {length};",
        *chunk_inits,
        "#pragma omp simd " + " ".join(clauses),
        header,
        *("  " + line for line in first),
        "}",
        *merges,
    ]
    sum_loop = ["#pragma omp simd " + " ".join(sum_clauses), header]
    sum_loop += ["  " + line for line in second] + ["}"]
    if in_lanes and blocked_sums:
        sum_loop = _lane_sum_loop(r, start, stop, second, block_inits, flushes) + lane_totals
    elif blocked_sums:
        # The chunk's sum in blocks of SUM_BLOCK, each added up in full-width float lanes.
        block, end = f"{r}_block", f"{r}_end"
        sum_loop[1] = f"for (int64_t {r} = {block}; {r} < {end}; ++{r}) {{"
        sum_loop = [
            f"for (int64_t {block} = {start}; {block} < {stop}; {block} += {SUM_BLOCK}) {{",
            f"  const int64_t {end} = {block} + {SUM_BLOCK} < {stop} ? {block} + {SUM_BLOCK} : {stop};",
            *("  " + line for line in [*block_inits, *sum_loop, *flushes]),
            "}",
        ]
    body += [*sum_loop, *rescales]
    loop = [f"for (int64_t {start} = 0; {start} < {length}; {start} += {chunk}) {{"]
    loop += ["  " + line for line in body] + ["}"]
    return emitter.take_outer() + inits + loop + finals


def _lane_sum_loop(
    r: str,
    start: str,
    stop: str,
    body: Sequence[str],
    zeros: Sequence[str],
    flushes: Sequence[str],
) -> list[str]:
    """A chunk's sums over ``[start, stop)`` into lane arrays: ``body`` adds element
    ``r`` to lane ``<r>_lane`` of the float lanes, which ``zeros`` clears and ``flushes``
    adds to the chunk's double lanes every :data:`LANE_BLOCK` elements (see
    :func:`~torchstrata.inductor.codegen.cpp.sum_loops.lane_loop`; the bounds are variables
    here). Whole sets of lanes, then the rest of the block in a partial one."""
    lane, lanes, block, end = f"{r}_lane", f"{r}_lanes", f"{r}_block", f"{r}_end"

    def over(count: str, lines: Sequence[str], indexed: bool) -> list[str]:
        head = f"for (int64_t {lane} = 0; {lane} < {count}; ++{lane}) {{"
        index = [f"  const int64_t {r} = {lanes} + {lane};"] if indexed else []
        return ["#pragma omp simd", head, *index, *("  " + line for line in lines), "}"]

    whole = [
        f"for (; {lanes} + {SUM_LANES} <= {end}; {lanes} += {SUM_LANES}) {{",
        *("  " + line for line in over(str(SUM_LANES), body, True)),
        "}",
    ]
    per_block = [
        f"const int64_t {end} = {block} + {LANE_BLOCK} < {stop} ? {block} + {LANE_BLOCK} : {stop};",
        *over(str(SUM_LANES), zeros, False),
        f"int64_t {lanes} = {block};",
        *whole,
        *over(f"{end} - {lanes}", body, True),
        *over(str(SUM_LANES), flushes, False),
    ]
    return [
        f"for (int64_t {block} = {start}; {block} < {stop}; {block} += {LANE_BLOCK}) {{",
        *("  " + line for line in per_block),
        "}",
    ]
