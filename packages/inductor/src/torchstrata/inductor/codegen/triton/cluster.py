"""Cluster rows: a long row walked by the programs of one thread-block cluster (Hopper).

A looped row kernel walks its whole row twice: once for the statistics, once more for the
output, which it hopes to re-read from L2. Over rows of 262144 bf16 one program per row
keeps 256 rows of 512 KB in flight, four times the H200's L2, and the second walk reads
most of its row from memory again. Here each row is cut into ``C`` chunks, one program
each, and the row's programs run as one cluster of ``C``: the hardware starts them
together on one GPC. Each walks its chunk for the statistics, publishes the chunk's
partial results to a scratch buffer, meets the others at a hardware cluster barrier
(release/acquire: the partials stored before it are visible after it), combines the
row's ``C`` partials, and walks its chunk again for the output. A program holds
``1/C`` of a row, so the second walk finds it in L2.

Unlike ``triton_split``'s cooperating programs there are no tickets, counters or polls:
the cluster is scheduled as a unit (nobody waits for a program that has not started)
and the barrier is one instruction. A kernel is compiled for one program and launched as
clusters by :class:`~torchstrata.inductor.launch.triton_launch.ClusterLaunch`; launched any other
way, its row statistics are NaN (never a silent wrong number). GPU (sm_90+) only: the
interpreter runs no inline PTX.

On the H200 (``bench/results/2026-12-01-h200-cluster-rows.txt``), softmax over 256
rows of 262144 bf16: 91.4 us generated in clusters of 8 chunks against 97.9 for the best
looped kernel with one program per row (65% -> 70% of the copy ceiling); handwritten,
88.2 against 105 for the same code without clusters. Over rows of 65536 the looped
kernel stays ahead (80 against 86 us): its second walk already hits L2.

Partials: ``ts_partials`` (float32, ``rows * stats * C``), as in ``triton_split``: stat
``k`` of chunk ``c`` of row ``r`` at ``(r * stats + k) * C + c``.
"""

from __future__ import annotations

from collections.abc import Sequence

from torchstrata.inductor.codegen.triton.size_buckets import next_power_of_2
from torchstrata.inductor.codegen.triton.split import can_split, combine_partials, partial_pointers
from torchstrata.inductor.ir.kernel import Kernel, ReductionSpec

#: Programs per row that clusters may hold: at most 8 (the portable limit), or exactly 16
#: (H100/H200; Triton's launcher asks for a non-portable cluster size only at 16).
CLUSTER_SIZES = (2, 4, 8, 16)
#: Scratch buffer the kernels take after their buffers.
CLUSTER_PARAMS = ("ts_partials",)

_BARRIER = (
    "barrier.cluster.arrive.release.aligned;\n\t"
    "barrier.cluster.wait.acquire.aligned;\n\tmov.b32 $0, $1;"
)


def can_cluster(kernel: Kernel, size: int, rblock: int) -> bool:
    """``kernel``'s rows can be walked by clusters of ``size`` programs in tiles of
    ``rblock``: float sums/maxima/minima (``triton_split.can_split``) on rows that ``size``
    chunks of whole tiles cover exactly."""
    return size in CLUSTER_SIZES and can_split(kernel) and kernel.row_length % (size * rblock) == 0


def _asm(text: str, operand: str) -> str:
    """An int32 from inline PTX ``text`` (``$0`` out, ``$1`` the int32 ``operand``),
    run by every thread and never moved across memory operations."""
    return (
        f"tl.inline_asm_elementwise({text!r}, '=r,r', [{operand}], dtype=tl.int32, "
        "is_pure=False, pack=1)"
    )


def header_lines(size: int, chunk: str, wide: bool) -> list[str]:
    """Program ``p`` takes chunk ``p % size`` (from ``cstart``) of row ``p // size``;
    ``ts_cluster`` is the size of the cluster it was launched in."""
    row = f"ticket // {size}"
    return [
        "ticket = tl.program_id(0)",
        f"ts_cluster = {_asm('mov.u32 $0, %cluster_nctarank;', 'ticket')}",
        f"row = ({row}).to(tl.int64)" if wide else f"row = {row}",
        f"chunk = ticket % {size}",
        f"cstart = chunk * {chunk}",
        "xindex = row + tl.arange(0, XBLOCK)[:, None]",
    ]


def combine_lines(
    kernel: Kernel,
    phase: Sequence[ReductionSpec],
    pairs: dict[str, ReductionSpec],
    size: int,
) -> list[str]:
    """After a looped phase's loop over the chunk (its ``red_*`` are the chunk's): publish
    them, meet at the barrier, and rebind every ``red_*`` of the phase (and of the sums
    its online maxima carry) to the row's. A sum of ``exp(v - max)`` is taken against the
    chunk's own max, so it is rescaled to the row's max when combined."""
    own = [spec for spec in phase if spec.name not in pairs]
    partners = [spec for spec in kernel.reductions if pairs.get(spec.name) in own]
    # indexed by the scalar `row`: the partials are a 1-D vector of `size`, one element
    # per thread (a [1, size] tile had every thread load them all: on the H200 the
    # generated kernel took 113 us against the handwritten 85, exp_clab.py)
    at = partial_pointers([*own, *partners], kernel, size)
    lines = [
        f"tl.store({at[spec.name]} + chunk + xzero, red_{spec.name})" for spec in [*own, *partners]
    ]
    lines += [
        f"ts_met = {_asm(_BARRIER, 'chunk')}",
        # the partials' positions depend on the barrier: no load of them moves above it
        f"sindex = tl.arange(0, {next_power_of_2(size)}) + (ts_met - chunk)",
        f"smask = sindex < {size}",
    ]
    for spec in own:
        mine = [p for p in partners if pairs[p.name] is spec]
        lines += combine_partials(spec, mine, at, axis=0)
    # launched other than as clusters of `size`: NaN statistics, not wrong ones
    lines += [
        f"red_{spec.name} = tl.where(ts_cluster == {size}, red_{spec.name}, float('nan'))"
        for spec in [*own, *partners]
    ]
    return lines


def scratch_size(kernel: Kernel, size: int) -> int:
    """Elements of ``ts_partials`` (float32)."""
    return kernel.rows * len(kernel.reductions) * size
