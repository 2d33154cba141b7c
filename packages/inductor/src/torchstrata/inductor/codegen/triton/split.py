"""Split rows: one long row reduced by several cooperating programs, read once from memory.

A row too long for one program's registers (softmax over 65536 or 262144 elements) is
otherwise looped over twice: once for its statistics, once more for the output, so its
input crosses the memory bus twice. Here the row is cut into ``split`` chunks of
``RBLOCK`` elements, one program per chunk, each holding its chunk in registers. Per
phase of reductions every program reduces its chunk, publishes the partial results to a
scratch buffer, and waits until all programs of the row have done so (a counter per row);
then each combines the row's partials and goes on (the next phase, then its part of the
output). A max with the sums of ``exp(v - max)`` that read it (softmax) publishes both
at once, each sum taken against the chunk's own max and rescaled when combined: one wait
per row instead of two.

Waiting on other programs is safe only if they all get to run. Programs take their work
in the order they start (a ticket from a global counter, not their program id): the
holders of a row's first tickets are running, and the remaining tickets go to the next
programs to start, so a row waits only for programs that are running or about to start,
never for one that needs a slot a waiting program holds (``split`` is far below the
number of programs a GPU runs at once). The counters return to zero within every launch
(the taker of the last ticket resets the ticket counter, the last program to leave a row
the row's), so the scratch buffers are allocated once per stream and reused by every call
on it. GPU only: the interpreter runs programs one after the other.

On the H200 (``bench/results/2026-11-30-h200-split-rows.txt``) where the time went:
not the waits (dropping them saved nothing), but the atomics' fences. Triton's default
``acq_rel`` on the tickets, and a launch-wide finish counter, each fenced every program;
with relaxed tickets and departures, and the output's ``exp(v - max)`` taken from the
chunk's terms, softmax over 256 rows of 262144 bf16 takes 99.5 us against 106 for the
best looped kernel (``2026-11-30-h200-k3-store-variants.txt``), and over 1024 rows of
65536 93.5 us against the looped 86. So the autotuner times split configurations for
rows of at least
``LONG_ROW_MIN`` elements by default; ``InductorOptions(split_rows=True)`` offers them
from ``SPLIT_MIN`` on, ``False`` never.

Scratch buffers (extra kernel arguments): ``ts_partials`` (float32, ``rows * stats *
split``: stat ``k`` of chunk ``c`` of row ``r`` at ``(r * stats + k) * split + c``) and
``ts_counters`` (int32, ``1 + 2 * rows``: tickets taken, then each row's arrivals and
departures).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from torchstrata.inductor.codegen.emitter import ExprEmitter
from torchstrata.inductor.codegen.size_names import named_sizes
from torchstrata.inductor.codegen.triton.flat_index import use_flat_indices, without_unused
from torchstrata.inductor.codegen.triton.printer import (
    RED_PARAM,
    ROWS_PARAM,
    TritonPrinter,
    derive_lines,
    literal,
    module_source,
    reduce_text,
    statistic_exp,
    store_line,
)
from torchstrata.inductor.codegen.triton.size_buckets import next_power_of_2
from torchstrata.inductor.ir.kernel import (
    Kernel,
    ReductionSpec,
    red_vars,
    reduction_identity,
    row_vars,
)
from torchstrata.inductor.ir.online import online_pairs, reduction_phases

SCRATCH_PARAMS = ("ts_partials", "ts_counters")
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def can_split(kernel: Kernel) -> bool:
    """Row reductions whose partial results are float32-exact: every reduction is a
    floating-point sum/max/min of the row (not prod: its partials could overflow early)."""
    return (
        bool(kernel.red_shape)
        and not kernel.parts
        and kernel.tail is None
        and bool(kernel.reductions)
        and all(spec.dtype in _FLOATS and spec.kind != "prod" for spec in kernel.reductions)
    )


def partial_stats(kernel: Kernel) -> int:
    """How many float32 partial results each chunk publishes (one per reduction)."""
    return len(kernel.reductions)


def scratch_sizes(kernel: Kernel, split: int) -> tuple[int, int]:
    """Elements of ``ts_partials`` (float32) and ``ts_counters`` (int32)."""
    return kernel.rows * partial_stats(kernel) * split, 1 + 2 * kernel.rows


def generate_split_triton(kernel: Kernel, split: int, chunk: int, flat_indices: bool = True) -> str:
    """The module of ``kernel`` with each row cut into ``split`` chunks of ``chunk``
    (``RBLOCK``) elements, one program each (launch ``rows * split`` programs, ``XBLOCK=1``);
    ``flat_indices``: indices over ``xindex``/``rindex`` where that divides less (0521)."""
    if not can_split(kernel):
        raise ValueError(f"{kernel.name} cannot be split across programs")
    if split * chunk < kernel.row_length or (split - 1) * chunk >= kernel.row_length:
        raise ValueError(f"{split} chunks of {chunk} do not cover a row of {kernel.row_length}")
    # the rows and the row length are the launch's ``xnumel``/``rnumel`` (decision 0285): a
    # row stride equal to the length is spelled as it, as in a plain row kernel
    length = kernel.row_length
    with named_sizes({length: RED_PARAM} if length >= 2 else {}):
        return _split_source(kernel, split, chunk, flat_indices)


def _split_source(kernel: Kernel, split: int, chunk: int, flat_indices: bool) -> str:
    wide = kernel.rows * kernel.row_length >= 2**31
    printer = TritonPrinter(kernel, True, interpret=False)
    emitter = ExprEmitter(printer, frozenset())
    printer.name_of = emitter.emit
    rows, reduced = row_vars(kernel.row_shape), red_vars(kernel.red_shape)
    derived = use_flat_indices(printer, rows, reduced, flat_indices)
    row = f"ticket // {split}"
    lines = [
        # relaxed: a ticket publishes nothing (Triton's default, acq_rel, fences each take)
        "ticket = tl.atomic_add(ts_counters, 1, sem='relaxed')",
        # every ticket is taken: ready for the next launch (of xnumel * split programs)
        f"if ticket == {ROWS_PARAM} * {split} - 1:",
        "    tl.atomic_xchg(ts_counters, 0, sem='relaxed')",
        f"row = ({row}).to(tl.int64)" if wide else f"row = {row}",
        f"chunk = ticket % {split}",
        "xindex = row + tl.arange(0, XBLOCK)[:, None]",
        "xmask = tl.full([XBLOCK, 1], 1, tl.int1)",
        "xzero = xindex * 0",
        f"rzero = tl.full([1, RBLOCK], 0, {'tl.int64' if wide else 'tl.int32'})",
        "rindex = chunk * RBLOCK + tl.arange(0, RBLOCK)[None, :]",
        "rmask = tl.full([1, RBLOCK], 1, tl.int1)"
        if kernel.row_length % chunk == 0
        else f"rmask = rindex < {RED_PARAM}",
        *derive_lines(rows, "xindex"),
        *derive_lines(reduced, "rindex"),
        # the partials are a 1-D vector indexed by the scalar `row`, one element per
        # thread: a [1, split] tile had every thread load them all (on the H200 the
        # cluster rows' combine took 113 us that way against 85, exp_clab.py)
        f"sindex = tl.arange(0, {next_power_of_2(split)})",
        f"smask = sindex < {split}",
        "arrivals = ts_counters + 1 + 2 * row",
    ]
    pairs = online_pairs(kernel.reductions)
    waits = 0
    for phase in reduction_phases(kernel.reductions):
        own = [spec for spec in phase if spec.name not in pairs]
        if not own:
            continue
        partners = [spec for spec in kernel.reductions if pairs.get(spec.name) in own]
        body, combine = _phase(emitter, own, partners, pairs, kernel, split)
        waits += 1
        lines += emitter.take_outer() + body + _wait(split * waits) + combine
    first = "xmask & (chunk == 0)"
    row_stores = [
        store_line(s, emitter.emit(s.value), printer, False, first) for s in kernel.row_stores
    ]
    lines += emitter.take_outer() + row_stores
    full_stores = [store_line(s, emitter.emit(s.value), printer, True) for s in kernel.full_stores]
    lines += emitter.take_outer() + full_stores + _depart(split)
    lines = without_unused(lines, derived)
    return module_source(kernel, lines, interpret=False, extra_params=SCRATCH_PARAMS)


def partial_offset(stat: int, count: int, split: int) -> str:
    """Where stat ``stat`` (of ``count``) of row ``row``'s chunks starts in ``ts_partials``."""
    return f"(row * {count} + {stat}) * {split}"


def partial_pointers(specs: Sequence[ReductionSpec], kernel: Kernel, split: int) -> dict[str, str]:
    """``{name: where the row's chunk partials of reduction name start}`` for ``specs``
    (stat ``k`` is ``kernel``'s ``k``-th reduction)."""
    stats = {spec.name: k for k, spec in enumerate(kernel.reductions)}
    count = len(stats)
    return {
        spec.name: f"ts_partials + {partial_offset(stats[spec.name], count, split)}"
        for spec in specs
    }


def combine_partials(
    spec: ReductionSpec, sums: Sequence[ReductionSpec], at: dict[str, str], axis: int
) -> list[str]:
    """Lines rebinding ``red_<spec>`` (and ``red_*`` of the ``sums`` of ``exp(v - max)``
    that ride on ``spec``, a max) to the row's, from its chunks' partials at ``at[name] +
    sindex`` (masked by ``smask``), reduced along ``axis``. Each chunk's sum was taken
    against its own max, so it is rescaled to the row's (``rsafe_<spec>``) when combined."""
    name = spec.name
    loaded = (
        f"tl.load({at[name]} + sindex, smask, other={partial_identity(spec)}, cache_modifier='.cg')"
    )
    lines = [
        f"all_{name} = {loaded}",
        f"red_{name} = {reduce_text(spec, f'all_{name}', False, axis=axis)}",
    ]
    if sums:
        lines.append(f"rsafe_{name} = tl.where(red_{name} == float('-inf'), 0.0, red_{name})")
    for partner in sums:
        scaled = (
            f"tl.load({at[partner.name]} + sindex, smask, other=0.0, cache_modifier='.cg')"
            f" * {statistic_exp(f'all_{name} - rsafe_{name}', spec.dtype)}"
        )
        lines.append(f"red_{partner.name} = {reduce_text(partner, scaled, False, axis=axis)}")
    return lines


def _phase(
    emitter: ExprEmitter,
    own: Sequence[ReductionSpec],
    partners: Sequence[ReductionSpec],
    pairs: dict[str, ReductionSpec],
    kernel: Kernel,
    split: int,
) -> tuple[list[str], list[str]]:
    """Lines reducing the chunk and publishing the partials, and lines combining them."""
    body: list[str] = []
    combine: list[str] = []
    for spec in own:
        name = spec.name
        identity = literal(reduction_identity(spec.kind, spec.dtype), spec.dtype)
        value = emitter.emit(spec.body)
        mine = [p for p in partners if pairs[p.name] is spec]
        at = partial_pointers([spec, *mine], kernel, split)
        body += [
            f"masked_{name} = tl.where(xmask & rmask, {value}, {identity})",
            f"part_{name} = {reduce_text(spec, f'masked_{name}', False)}",
            f"tl.store({at[name]} + chunk + xzero, part_{name})",
        ]
        combine += combine_partials(spec, mine, at, axis=0)
        if not mine:
            continue
        body.append(f"psafe_{name} = tl.where(part_{name} == float('-inf'), 0.0, part_{name})")
        body.append(
            f"term_{name} = tl.where(xmask & rmask, tl.exp(masked_{name} - psafe_{name}), 0.0)"
        )
        # the partners' exp(v - max) along the row, from the chunk's own terms: one exp per
        # element instead of two (the output reads it: softmax)
        combine.append(f"rescaled_{name} = term_{name} * tl.exp(psafe_{name} - rsafe_{name})")
        emitter.outer.names[mine[0].body] = f"rescaled_{name}"
        for partner in mine:
            body += [
                f"part_{partner.name} = {reduce_text(partner, f'term_{name}', False)}",
                f"tl.store({at[partner.name]} + chunk + xzero, part_{partner.name})",
            ]
    return body, combine


def partial_identity(spec: ReductionSpec) -> str:
    """The identity of ``spec``'s reduction as Triton source (masked partials load it)."""
    value = reduction_identity(spec.kind, spec.dtype)
    return f"float('{value}')" if isinstance(value, float) else repr(value)


def _wait(target: int) -> list[str]:
    """Arrive at the row's counter, then spin until ``target`` arrivals (all chunks)."""
    return [
        "tl.debug_barrier()",
        "tl.atomic_add(arrivals, 1, sem='release')",
        "seen = tl.atomic_add(arrivals, 0, sem='acquire')",
        f"while seen < {target}:",
        "    seen = tl.atomic_add(arrivals, 0, sem='acquire')",
        "tl.debug_barrier()",
    ]


def _depart(split: int) -> list[str]:
    """Leave the row; the last to leave resets the row's counters for the next launch.

    Relaxed: a release here would wait for this program's output stores to complete (on
    the H200, softmax over rows of 262144 took 106 us with relaxed tickets and departures
    and no launch-wide finish counter, 125 us with acq_rel ones). The departure is still
    ordered after the acquire poll that saw every arrival, so the reset cannot overtake a
    program of this row that is still polling.
    """
    return [
        "left = tl.atomic_add(arrivals + 1, 1, sem='relaxed')",
        f"if left == {split - 1}:",
        "    tl.atomic_xchg(arrivals, 0, sem='relaxed')",
        "    tl.atomic_xchg(arrivals + 1, 0, sem='relaxed')",
    ]
