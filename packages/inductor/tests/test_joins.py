"""``joins.fuse_nearby`` on random plans: kernels that read and write random buffers, a
``fuse`` that accepts random pairs. Whatever it joins and moves, every kernel's work is
kept exactly once, and a kernel that reads a buffer still runs after the kernel that
writes it (the order of any two steps sharing a buffer is kept)."""

from __future__ import annotations

import attrs
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchstrata.inductor.ir.exprs import Constant
from torchstrata.inductor.ir.indexing import Index
from torchstrata.inductor.ir.kernel import BufferArg, Kernel, Store
from torchstrata.inductor.schedule.joins import fuse_nearby, stored_buffers


def _kernel(name: str, reads: set[str], writes: set[str]) -> Kernel:
    stores = tuple(
        Store(buffer, Index.constant(0), Constant(0.0, torch.float32), torch.float32)
        for buffer in sorted(writes)
    )
    args = tuple(BufferArg(b, torch.float32) for b in sorted(reads | writes))
    return Kernel(name, (1,), (), (), stores, (), args)


@st.composite
def _plans(draw: st.DrawFn) -> tuple[list[Kernel], set[tuple[str, str]]]:
    """Kernels ``k{i}`` each writing ``b{i}`` and reading earlier kernels' buffers (an SSA
    plan, as the scheduler makes), and the pairs ``(host, after)`` that ``fuse`` accepts."""
    count = draw(st.integers(2, 9))
    kernels = []
    for i in range(count):
        reads = draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else set()
        kernels.append(_kernel(f"k{i}", {f"b{j}" for j in reads}, {f"b{i}"}))
    names = [k.name for k in kernels]
    pairs = draw(st.sets(st.tuples(st.sampled_from(names), st.sampled_from(names)), max_size=8))
    return kernels, {(a, b) for a, b in pairs if a != b}


def _fuse(accepted: set[tuple[str, str]]):
    """Joins ``after`` (a single kernel) to ``host`` when a kernel of ``host`` accepts it."""

    def fuse(host: Kernel, after: Kernel) -> Kernel | None:
        members = host.name.split("+")
        if "+" in after.name or not any((h, after.name) in accepted for h in members):
            return None
        args = {a.name: a for a in (*host.args, *after.args)}
        return attrs.evolve(
            host,
            name=f"{host.name}+{after.name}",
            row_stores=host.row_stores + after.row_stores,
            args=tuple(args.values()),
        )

    return fuse


@settings(max_examples=300, deadline=None)
@given(_plans(), st.booleans())
def test_joins_keep_every_kernel_once_and_every_dependency_in_order(plan, hosts_after):
    kernels, accepted = plan
    steps = fuse_nearby(kernels, _fuse(accepted), hosts_after=hosts_after)
    # every kernel's work exactly once
    parts = [name for step in steps for name in step.name.split("+")]
    assert sorted(parts) == sorted(k.name for k in kernels)
    # a reader runs in the step of its writer or after it
    where = {name: i for i, step in enumerate(steps) for name in step.name.split("+")}
    writer = {buffer: k.name for k in kernels for buffer in stored_buffers(k)}
    for k in kernels:
        for arg in k.args:
            source = writer.get(arg.name)
            if source is not None and source != k.name:
                assert where[source] <= where[k.name], (source, k.name, [s.name for s in steps])


def test_a_kernel_does_not_move_past_one_that_writes_what_it_reads():
    a = _kernel("a", set(), {"ba"})
    b = _kernel("b", {"ba"}, {"bb"})  # reads a's output
    c = _kernel("c", {"bb"}, {"bc"})  # reads b's output
    accepted = {("a", "c")}  # c would join a, but it would run before b
    steps = fuse_nearby([a, b, c], _fuse(accepted))
    assert [s.name for s in steps] == ["a", "b", "c"]
    independent = _kernel("c", set(), {"bc"})  # reads nothing of b: it may move back
    steps = fuse_nearby([a, b, independent], _fuse(accepted))
    assert [s.name for s in steps] == ["a+c", "b"]
