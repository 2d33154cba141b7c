"""Loops of a Triton kernel over its row in ``RBLOCK`` tiles (or over a program's rows in
``XBLOCK`` blocks), plain or software-pipelined.

A *pipelined* loop issues the next tile's loads before this tile's work: the loaded values
wait in registers (as loaded, 16-bit floats unconverted) while the tile is reduced, so a
program keeps a tile's bytes in flight throughout instead of waiting a memory latency per
iteration. On the H200, softmax over [1024, 65536] bf16 with online statistics per group
ran 85.7 -> 78.4 us with its output loop pipelined; cross-entropy's reduction loop got
slower (bench/results/2026-11-30-h200-prefetch.txt). Triton's own ``num_stages``
pipelining did not help these loops (they have no ``tl.dot``).

Only loads that read nothing the tile computes move ahead (not a gather at a computed
position, nor a load guarded by a computed condition). The next tile's loads are masked
to the row (``0 <= rindex < length``) even where the tile's own mask is constant, so the
last iteration's look-ahead reads nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_LOAD = re.compile(r"^(?P<name>\w+) = (?P<load>tl\.load\(.*?\))(?P<convert>\.to\(tl\.float32\))?$")
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")


def row_loop(
    length: int | str, body: Sequence[str], reverse: bool = False, chunk: str | None = None
) -> list[str]:
    """A loop over the row in steps of ``RBLOCK`` (``roffset``); ``reverse`` walks it from
    the end, so the tiles the previous pass read last (still in cache) are read first.
    ``chunk``: only the ``chunk`` elements from ``cstart`` (a cluster's chunk of the row,
    ``triton_cluster``)."""
    indented = ["    " + line for line in body]
    if chunk is None:
        span, offset = length, ""
        if not reverse:
            return [f"for roffset in range(0, {length}, RBLOCK):", *indented]
    else:
        # the loop counts from 0, the chunk's start is added: a loop from `cstart` would
        # leave Triton unable to prove the tiles 16-byte aligned (no vector loads)
        span, offset = chunk, "cstart + "
        if not reverse:
            return [
                f"for rstep in range(0, {chunk}, RBLOCK):",
                "    roffset = cstart + rstep",
                *indented,
            ]
    return [
        f"for rstep in range(0, {span}, RBLOCK):",
        f"    roffset = {offset}({span} - 1) // RBLOCK * RBLOCK - rstep",
        *indented,
    ]


def tile_loop(
    length: int | str,
    tile_lines: Sequence[str],
    inner: Sequence[str],
    after: Sequence[str],
    *,
    prefetch: bool,
    reverse: bool = False,
    chunk: str | None = None,
) -> list[str]:
    """:func:`row_loop` over ``tile_lines`` (``rindex = {start}tl.arange(...)``, then
    ``rmask``, then the index variables), ``inner`` (the tile's values) and ``after`` (the
    accumulator updates or stores); with ``prefetch``, ``inner``'s movable loads are
    issued one tile ahead (masked to the chunk, when there is one)."""
    ahead, rest = _movable_loads(inner) if prefetch else ([], list(inner))
    if not ahead:
        body = [*_tile(tile_lines, "roffset + "), *inner, *after]
        return row_loop(length, body, reverse, chunk)
    if chunk is None:
        start, low, high, span = "", "0", f"{length}", length
    else:
        start, low, high, span = "cstart + ", "cstart", f"cstart + {chunk}", chunk
    first = f"{start}({span} - 1) // RBLOCK * RBLOCK + " if reverse else start
    step = "roffset - RBLOCK + " if reverse else "roffset + RBLOCK + "
    bound = f"(rindex >= {low}) & (rindex < {high})" if reverse else f"rindex < {high}"
    next_tile = _tile(tile_lines, step)
    next_tile[1] = f"rmask = {bound}"
    loads = [f"ahead_{m['name']} = {m['load']}" for m in ahead]
    take = [f"{m['name']} = ahead_{m['name']}{m['convert'] or ''}" for m in ahead]
    body = [*take, *next_tile, *loads, *_tile(tile_lines, "roffset + "), *rest, *after]
    return [*_tile(tile_lines, first), *loads, *row_loop(length, body, reverse, chunk)]


def block_loop(
    chunk: int | str,
    rows: int | str,
    tile_lines: Sequence[str],
    inner: Sequence[str],
    after: Sequence[str],
    *,
    prefetch: bool,
) -> list[str]:
    """A program's loop over its ``chunk`` rows in blocks of ``XBLOCK`` (``xstep``), for
    kernels whose program walks rows (column partial sums, ``partials.py``):
    ``tile_lines`` are ``xindex = ...{start}tl.arange(...)``, then ``xmask``, then the row
    variables. With ``prefetch``, ``inner``'s movable loads are issued one block ahead,
    the look-ahead masked to the kernel's ``rows`` (the last program's reads nothing)."""
    ahead, rest = _movable_loads(inner) if prefetch else ([], list(inner))
    header = f"for xstep in range(0, {chunk}, XBLOCK):"
    if not ahead:
        body = [*_tile(tile_lines, "xstep + "), *inner, *after]
        return [header] + ["    " + line for line in body]
    next_block = _tile(tile_lines, "xstep + XBLOCK + ")
    next_block[1] = f"xmask = xindex < {rows}"
    loads = [f"ahead_{m['name']} = {m['load']}" for m in ahead]
    take = [f"{m['name']} = ahead_{m['name']}{m['convert'] or ''}" for m in ahead]
    body = [*take, *next_block, *loads, *_tile(tile_lines, "xstep + "), *rest, *after]
    return [*_tile(tile_lines, ""), *loads, header] + ["    " + line for line in body]


def _movable_loads(inner: Sequence[str]) -> tuple[list[re.Match[str]], list[str]]:
    """``inner``'s loads that read nothing ``inner`` computes (they may move a tile
    ahead), and the other lines."""
    ahead: list[re.Match[str]] = []
    rest: list[str] = []
    defined: set[str] = set()
    for line in inner:
        match = _LOAD.match(line)
        if match and not set(_NAME.findall(match["load"])) & defined:
            ahead.append(match)
        else:
            rest.append(line)
        defined.add(line.split(" = ", 1)[0])
    return ahead, rest


def _tile(tile_lines: Sequence[str], start: str) -> list[str]:
    """The tile's index lines for a tile starting at ``start`` (text ending in ``+ ``)."""
    return [line.format(start=start) for line in tile_lines]
