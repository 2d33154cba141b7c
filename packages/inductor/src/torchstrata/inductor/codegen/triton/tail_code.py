"""Triton code of a kernel's tail (``tails.py``): each program's partial sums, then the
last program's combination and stores."""

from __future__ import annotations

from torchstrata.inductor.codegen.emitter import ExprEmitter
from torchstrata.inductor.codegen.triton.printer import ROWS_PARAM, TritonPrinter, store_line
from torchstrata.inductor.ir.kernel import Kernel

#: Partial sums the last program adds per step of its loop (a fixed order: deterministic).
TAIL_BLOCK = 1024


def tail_lines(kernel: Kernel, emitter: ExprEmitter, printer: TritonPrinter) -> list[str]:
    """Each program's partial sums of the tail, then the last program's combination and
    stores (see ``tails.py``)."""
    assert kernel.tail is not None
    slots = kernel.rows  # at most one program per row
    # each reduction's slots start at a multiple of the rows, read from ``xnumel`` (its
    # value: one source over row counts on a GPU, decision 0310)
    starts = ["0", *(f"{k} * {ROWS_PARAM}" for k in range(1, len(kernel.tail.reductions)))]
    lines = []
    for k, spec in enumerate(kernel.tail.reductions):
        value = emitter.emit(spec.body)
        lines += emitter.take_outer()
        lines.append(
            f"tl.store(ts_tail + {starts[k]} + tl.program_id(0), "
            f"tl.reduce(tl.where(xmask, {value}, 0.0), None, _sum_combine))"
        )
    cached = "" if printer.interpret else ", cache_modifier='.cg'"
    # Triton 3.6's interpreter cannot loop to a bound that is not a constant: there the
    # loop runs to the most programs there can be, the mask doing the rest
    bound = str(slots) if printer.interpret else "tl.num_programs(0)"
    lines += [
        "tl.debug_barrier()",  # every thread's partial stored before the release below
        "ts_done = tl.atomic_add(ts_tail_count, 1, sem='acq_rel')",
        "if ts_done == tl.num_programs(0) - 1:",
        "    tl.atomic_xchg(ts_tail_count, 0, sem='relaxed')",
        "    tl.debug_barrier()",
    ]
    for k, spec in enumerate(kernel.tail.reductions):
        lines += [
            f"    ts_acc = tl.full([{TAIL_BLOCK}], 0.0, tl.float32)",
            f"    for ts_start in range(0, {bound}, {TAIL_BLOCK}):",
            f"        ts_i = ts_start + tl.arange(0, {TAIL_BLOCK})",
            f"        ts_acc += tl.load(ts_tail + {starts[k]} + ts_i, "
            f"ts_i < tl.num_programs(0), other=0.0{cached})",
            f"    red_{spec.name} = tl.reduce(ts_acc, 0, _sum_combine)",
        ]
    tail = [store_line(s, emitter.emit(s.value), printer, False) for s in kernel.tail.stores]
    lines += [f"    {line}" for line in emitter.take_outer() + tail]
    return lines
