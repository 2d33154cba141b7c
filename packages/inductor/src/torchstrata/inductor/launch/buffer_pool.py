"""Large CPU scratch buffers kept from one launcher call to the next (decision 0315).

A kernel store that lives only inside one call (no output, no extern call that keeps a
reference holds it: the launcher's ``reusable`` buffers) is allocated fresh on every call
and freed before the call returns. For a large CPU buffer that costs more than the
allocator's call: glibc returns the freed memory to the system (the heap's top is
trimmed, or the chunk was mapped on its own), so the next call's kernel faults every
4 KB page in again. The bench GPT's cross-entropy gradient (``[128, 8192]`` fp32, 4 MB)
took 1.7 ms to write fresh against 0.7 ms into the same buffer already mapped.

So the launcher keeps such a buffer: where it is allocated it takes the one the previous
call left in the allocation's pool (``_take``), allocating only when the pool is empty,
and where its last name (the buffer, a buffer it was handed on to, a view of it) is
released it puts it back. A pool is one list per allocation, in the launcher's own
globals: ``list.pop`` and ``list.append`` are atomic, so two threads calling one launcher
at once each get a buffer of their own (the second allocates). A call that raises leaves
its buffer to the garbage collector; the next call allocates one. The memory of a pooled
buffer stays allocated while the compiled graph lives: only buffers of at least
:data:`POOL_MIN_BYTES` on the CPU, of static shape, are pooled (smaller ones come from
the heap, already mapped), and ``InductorOptions(buffer_pool=False)`` turns it off.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

#: Bytes from which a CPU scratch buffer is kept between calls: glibc's default mmap
#: threshold is 128 KB and its trim threshold twice the largest freed mapping, so from
#: about a megabyte a freed buffer's pages are likely to go back to the system.
POOL_MIN_BYTES = 1 << 20


def take(pool: list[torch.Tensor]) -> torch.Tensor | None:
    """The buffer the last call put back into ``pool``, or None (allocate one)."""
    try:
        return pool.pop()
    except IndexError:
        return None


def poolable(kind: tuple[Any, ...]) -> bool:
    """Whether a buffer of ``kind`` (shape, strides, dtype, device) is kept between calls:
    on the CPU, of static shape and strides, of at least :data:`POOL_MIN_BYTES`."""
    shape, strides, dtype, device = kind
    sizes = (*shape, *strides)
    if str(device) != "cpu" or not all(type(size) is int for size in sizes):
        return False
    if any(size == 0 for size in shape):
        return False
    extent = 1 + sum((size - 1) * stride for size, stride in zip(shape, strides, strict=True))
    return extent * dtype.itemsize >= POOL_MIN_BYTES


_ALLOCATION = " = empty_strided("


def pool_buffers(
    lines: list[str],
    pooled: Mapping[str, tuple[Any, ...]],
    view_bases: Mapping[str, str] | None = None,
) -> list[str]:
    """``lines`` (after ``launcher.reuse_buffers``) with the buffers in ``pooled`` (by name,
    their kinds) taken from and put back into pools.

    A buffer's names are its own, the names it is handed on to (``name = buf  # reused``)
    and its views (``view_bases``: view name -> base name). It goes back to its pool at
    the ``del`` that releases the last of them, through a name of the buffer itself: where
    a view outlives those, the last of them is released with the view instead. A buffer
    handed on from one that is not pooled is left as it was."""
    pools: dict[str, int] = {}  # pooled allocation -> its pool's number
    group: dict[str, str] = {}  # name -> the allocation whose storage it holds
    live: dict[str, set[str]] = {}  # allocation -> its names not released yet
    returns: dict[int, list[tuple[str, str]]] = {}  # del line -> (allocation, name)
    released: dict[str, tuple[int, str]] = {}  # allocation -> (del line, own name)
    moved: set[tuple[int, str]] = set()  # (del line, name) released later instead
    views = view_bases or {}
    for index, line in enumerate(lines):
        stripped = line.strip()
        name, _, rest = stripped.partition(" = ")
        if stripped.startswith("del "):
            dying = stripped[4:].split(", ")
            for dead in dying:
                base = group.get(dead)
                if base is None or dead not in live[base]:
                    continue
                live[base].discard(dead)
                if dead not in views:
                    released[base] = (index, dead)
                if live[base]:
                    continue
                # put back through a name of the buffer itself (not a view): one released
                # on this line, or the last one released before, kept until now
                owner_line, owner = released[base]
                if owner_line != index:
                    moved.add((owner_line, owner))
                returns.setdefault(index, []).append((base, owner))
        elif _ALLOCATION in stripped and name in pooled and poolable(pooled[name]):
            pools[name] = len(pools)
            group[name] = name
            live[name] = {name}
        elif rest.endswith("  # reused") and rest.removesuffix("  # reused") in group:
            base = group[rest.removesuffix("  # reused")]
            group[name] = base
            live[base].add(name)
        elif name in views:
            base = group.get(views[name])
            if base is not None:
                group[name] = base
                live[base].add(name)
    out: list[str] = []
    for index, line in enumerate(lines):
        stripped = line.strip()
        name = stripped.partition(" = ")[0]
        indent = line[: len(line) - len(line.lstrip())]
        if name in pools and _ALLOCATION in stripped:
            out.append(f"{indent}{name} = _take(_pool{pools[name]})")
            out.append(f"{indent}if {name} is None:")
            out.append(f"    {line}")
            continue
        if not stripped.startswith("del "):
            out.append(line)
            continue
        names = [n for n in stripped[4:].split(", ") if (index, n) not in moved]
        for base, owner in returns.get(index, ()):
            out.append(f"{indent}_pool{pools[base]}.append({owner})")
            if owner not in names:
                names.append(owner)
        if names:
            out.append(f"{indent}del {', '.join(names)}")
    return out


def pool_globals(source: str) -> dict[str, Any]:
    """``_take`` and fresh, empty pools for the ``_poolN`` names that ``source`` (a
    launcher) takes from: each compiled launcher has pools of its own."""
    found: dict[str, Any] = {"_take": take}
    for number in _TAKEN.findall(source):
        found[f"_pool{number}"] = []
    return found


_TAKEN = re.compile(r"= _take\(_pool(\d+)\)")
