"""Horizontal fusion: consecutive small independent pointwise kernels become one launch.

A graph often ends in several small pointwise kernels of different shapes that do not
read each other's results (an optimizer step over many parameters, the scalars of a
loss, per-parameter gradient scaling). Each costs a kernel launch, which dwarfs its work.
Consecutive kernels that are pointwise, have at most ``MAX_ELEMENTS`` elements each and
do not load a buffer that an earlier one of the run stores are merged (up to
``MAX_PARTS``) into one :class:`Kernel` whose ``parts`` are the originals: the launch
covers the concatenation of their elements, each element computing its own part.
"""

from __future__ import annotations

from collections.abc import Sequence

from torchstrata.inductor.ir.kernel import BufferArg, Kernel
from torchstrata.inductor.schedule.joins import stored_buffers
from torchstrata.inductor.schedule.scheduler import ExternStep

MAX_ELEMENTS = 1 << 16
MAX_PARTS = 8

Step = Kernel | ExternStep


def _small_pointwise(step: Step) -> bool:
    return (
        isinstance(step, Kernel)
        and not step.is_reduction
        and not step.parts
        and 0 < step.rows <= MAX_ELEMENTS
    )


def _independent(run: Sequence[Kernel], kernel: Kernel) -> bool:
    loaded = {arg.name for arg in kernel.args} - stored_buffers(kernel)
    return not any(loaded & stored_buffers(earlier) for earlier in run)


def merge(parts: Sequence[Kernel], name: str) -> Kernel:
    """One kernel running ``parts`` (see the module docstring)."""
    args: dict[str, BufferArg] = {}
    for part in parts:
        for arg in part.args:
            args.setdefault(arg.name, arg)
    return Kernel(
        name,
        (sum(part.rows for part in parts),),
        (),
        (),
        tuple(store for part in parts for store in part.row_stores),
        (),
        tuple(args.values()),
        tuple(dict.fromkeys(op for part in parts for op in part.ops)),
        tuple(parts),
    )


def fuse_horizontally(steps: Sequence[Step]) -> tuple[Step, ...]:
    """``steps`` with every run of mergeable kernels replaced by one horizontal kernel."""
    fused: list[Step] = []
    run: list[Kernel] = []

    def flush() -> None:
        if len(run) > 1:
            fused.append(merge(run, f"{run[0].name}_h{len(run)}"))
        else:
            fused.extend(run)
        run.clear()

    for step in steps:
        if isinstance(step, Kernel) and _small_pointwise(step):
            if len(run) == MAX_PARTS or not _independent(run, step):
                flush()
            run.append(step)
            continue
        flush()
        fused.append(step)
    flush()
    return tuple(fused)
