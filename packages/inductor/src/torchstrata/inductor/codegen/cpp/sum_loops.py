"""Loops of C++ row sums: float32 sums added in blocks (:func:`blocked_loop`) or in lane
arrays (:func:`lane_loop`, :func:`lane_total`) before they join double accumulators."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from torchstrata.inductor.codegen.cpp.exprs import compute_type
from torchstrata.inductor.codegen.cpp.half import widened_blocks
from torchstrata.inductor.codegen.size_names import number
from torchstrata.inductor.ir.indexing import Var

#: Elements of a float32 sum that float accumulators (one per SIMD lane) add before the
#: block's sum joins a double accumulator. Each lane then adds SUM_BLOCK / 8 (AVX2)
#: elements one after another, and the block's rounding error stays within about two
#: float32 ulps (at 256, equal values came out 5 ulps off; a whole row of 70001, 400).
SUM_BLOCK = 128
#: The lanes of a float32 row sum that :func:`lane_loop` keeps in arrays (two 512-bit
#: vectors, four 256-bit ones: independent add chains), each adding LANE_BLOCK / LANES
#: elements (8, as SUM_BLOCK's lanes on AVX2) before joining its double lane.
SUM_LANES = 32
LANE_BLOCK = 256


def accumulator_type(dtype: torch.dtype, kind: str) -> str:
    """The C++ type that a ``kind`` reduction of ``dtype`` values accumulates in: double for
    a float32 sum, added to once per block (see :func:`blocked_loop`); else the values'."""
    return "double" if kind == "sum" and dtype == torch.float32 else compute_type(dtype)


def blocked_loop(
    var: Var, body: Sequence[str], pragma: str, start: Sequence[str], flush: Sequence[str]
) -> list[str]:
    """A loop over ``var`` in blocks of :data:`SUM_BLOCK`: ``start`` before each block's
    loop (``pragma`` on it), ``flush`` after it. One block when ``var`` is that short."""

    def loop(begin: object, end: object) -> list[str]:
        header = f"for (int64_t {var.name} = {begin}; {var.name} < {end}; ++{var.name}) {{"
        return [*start, pragma, header, *("  " + line for line in body), "}", *flush]

    size = number(var.size)
    if var.size <= SUM_BLOCK:
        return loop(0, size)
    full = var.size - var.size % SUM_BLOCK
    # Whole blocks first: a constant trip count spares the vectoriser its remainder code.
    block = f"{var.name}_block"
    lines = [
        f"for (int64_t {block} = 0; {block} < {_whole(var, SUM_BLOCK)}; {block} += {SUM_BLOCK}) {{",
        *("  " + line for line in loop(block, f"{block} + {SUM_BLOCK}")),
        "}",
    ]
    if size != str(var.size):  # a size argument: the rest, where there is one
        tail = f"{var.name}_tail"
        rest = loop(tail, size)
        return [
            *lines,
            "{",
            f"  const int64_t {tail} = {_whole(var, SUM_BLOCK)};",
            f"  if ({tail} < {size}) {{",
            *("    " + line for line in rest),
            "  }",
            "}",
        ]
    return lines + (loop(full, var.size) if full < var.size else [])


def _whole(var: Var, block: int) -> str:
    """The elements of ``var``'s loop in whole blocks of ``block``: a literal, or computed
    from the size argument that spells its size (decision 0285)."""
    size = number(var.size)
    if size == str(var.size):
        return str(var.size - var.size % block)
    return f"({size} / {block}) * {block}"


def lane_loop(
    var: Var, body: Sequence[str], start: Sequence[str], flush: Sequence[str]
) -> list[str]:
    """A loop over ``var`` whose ``body`` adds to lane arrays indexed by ``<var>_lane``
    (one of :data:`SUM_LANES`): ``start`` zeroes the float lanes, ``flush`` adds them to
    the wide ones, every :data:`LANE_BLOCK` elements and after the last.

    An ``omp simd reduction`` combines its lanes in order after the loop, one scalar add
    after another (32 dependent adds for 16-bit inputs); per block of SUM_BLOCK that was
    most of a long row sum's time. Lane arrays are combined once per row, by the caller.
    A whole block's contiguous fp16 loads are widened into float arrays before its lane
    loops (:func:`~torchstrata.inductor.codegen.cpp.half.widened_blocks`).
    """
    lane, lanes = f"{var.name}_lane", f"{var.name}_lanes"
    block = f"{var.name}_block"
    widen, block_body = widened_blocks(body, var.name, block, LANE_BLOCK)

    def inner(count: int | str, body: Sequence[str] = body) -> list[str]:
        return [
            "#pragma omp simd",
            f"for (int64_t {lane} = 0; {lane} < {count}; ++{lane}) {{",
            f"  const int64_t {var.name} = {lanes} + {lane};",
            *("  " + line for line in body),
            "}",
        ]

    def offset(begin: str | int, by: int) -> str:
        if isinstance(begin, int):
            return str(begin + by)
        return f"{begin} + {by}" if by else begin

    def run(begin: str | int, count: int, body: Sequence[str] = body) -> list[str]:
        """Lane loops over ``count`` elements from ``begin`` (a variable or a number)."""
        whole, tail = count - count % SUM_LANES, count % SUM_LANES
        lines: list[str] = []
        if whole:
            lines += [
                f"for (int64_t {lanes} = {begin}; {lanes} < {offset(begin, whole)}; "
                f"{lanes} += {SUM_LANES}) {{",
                *("  " + line for line in inner(SUM_LANES, body)),
                "}",
            ]
        if tail:
            lines += [
                "{",
                f"  const int64_t {lanes} = {offset(begin, whole)};",
                *("  " + line for line in inner(tail, body)),
                "}",
            ]
        return lines

    if number(var.size) != str(var.size):
        return _sized_lane_loop(var, start, widen, block_body, flush, inner, run)
    full = var.size - var.size % LANE_BLOCK
    lines: list[str] = []
    if full:
        each = [*start, *widen, *run(block, LANE_BLOCK, block_body), *flush]
        lines += [
            f"for (int64_t {block} = 0; {block} < {full}; {block} += {LANE_BLOCK}) {{",
            *("  " + line for line in each),
            "}",
        ]
    if full < var.size:
        lines += [*start, *run(full, var.size - full), *flush]
    return lines


def _sized_lane_loop(
    var: Var,
    start: Sequence[str],
    widen: Sequence[str],
    block_body: Sequence[str],
    flush: Sequence[str],
    inner: Callable[[int | str], list[str]],
    run: Callable[[str | int, int, Sequence[str]], list[str]],
) -> list[str]:
    """:func:`lane_loop` over a size argument (decision 0285): whole blocks as there, then
    the rest (a run-time count, none in a row of whole blocks) in whole sets of lanes and
    one partial set, as a chunk of an online loop
    (:func:`~torchstrata.inductor.codegen.cpp.online.online_phase`) does."""
    size = number(var.size)
    lanes, block, tail = f"{var.name}_lanes", f"{var.name}_block", f"{var.name}_tail"
    whole = _whole(var, LANE_BLOCK)
    each = [*start, *widen, *run(block, LANE_BLOCK, block_body), *flush]
    rest = [
        *start,
        f"int64_t {lanes} = {tail};",
        f"for (; {lanes} + {SUM_LANES} <= {size}; {lanes} += {SUM_LANES}) {{",
        *("  " + line for line in inner(SUM_LANES)),
        "}",
        *inner(f"{size} - {lanes}"),
        *flush,
    ]
    return [
        f"for (int64_t {block} = 0; {block} < {whole}; {block} += {LANE_BLOCK}) {{",
        *("  " + line for line in each),
        "}",
        "{",  # a scope of its own: a row may have several such loops
        f"  const int64_t {tail} = {whole};",
        f"  if ({tail} < {size}) {{",
        *("    " + line for line in rest),
        "  }",
        "}",
    ]


def lane_total(lanes: str, total: str, ctype: str, lane: str) -> list[str]:
    """Lines defining ``total`` (of C++ type ``ctype``) as the sum of the
    :data:`SUM_LANES` lanes of the array ``lanes``, pairwise: halves added in one SIMD
    step each, five dependent vector adds where adding lane after lane was 31 scalar ones
    (about 124 cycles a row). ``lanes`` is summed in place; ``lane`` names the index."""
    lines: list[str] = []
    width = SUM_LANES // 2
    while width > 1:
        lines += [
            "#pragma omp simd",
            f"for (int64_t {lane} = 0; {lane} < {width}; ++{lane}) "
            f"{lanes}[{lane}] = {lanes}[{lane}] + {lanes}[{lane} + {width}];",
        ]
        width //= 2
    return [*lines, f"const {ctype} {total} = {lanes}[0] + {lanes}[1];"]


def over_lanes(lane: str, lines: Sequence[str]) -> list[str]:
    """An ``omp simd`` loop of ``lines`` over the :data:`SUM_LANES` lanes indexed by
    ``lane`` (empty when ``lines`` is)."""
    if not lines:
        return []
    header = f"for (int64_t {lane} = 0; {lane} < {SUM_LANES}; ++{lane}) {{"
    return ["#pragma omp simd", header, *("  " + line for line in lines), "}"]


def lane_combine(lanes: str, total: str, ctype: str, lane: str, combine: str) -> list[str]:
    """Lines defining ``total`` (of C++ type ``ctype``) as the :data:`SUM_LANES` lanes of
    the array ``lanes`` combined pairwise by ``combine`` (a format of ``acc`` and ``v``,
    as :data:`~torchstrata.inductor.codegen.cpp.exprs.COMBINE`'s), halves in one SIMD
    step each, as :func:`lane_total` adds them. ``lanes`` is combined in place."""
    lines: list[str] = []
    width = SUM_LANES // 2
    while width > 1:
        step = combine.format(acc=f"{lanes}[{lane}]", v=f"{lanes}[{lane} + {width}]")
        lines += [
            "#pragma omp simd",
            f"for (int64_t {lane} = 0; {lane} < {width}; ++{lane}) "
            f"{lanes}[{lane}] = static_cast<{ctype}>({step});",
        ]
        width //= 2
    last = combine.format(acc=f"{lanes}[0]", v=f"{lanes}[1]")
    return [*lines, f"const {ctype} {total} = static_cast<{ctype}>({last});"]
