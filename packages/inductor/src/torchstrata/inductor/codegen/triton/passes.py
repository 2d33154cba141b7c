"""The rewrites only the Triton backend asks for: long column sums split before lowering,
and tails, column partials and horizontal fusion applied to the plan. A symbolic
lowering's plan has no tails or partials (their scratch buffers and chunks are sized by
the rows: decision 0400)."""

from __future__ import annotations

from collections.abc import Sequence

from torchstrata.core import Graph, GraphPass, InductorOptions
from torchstrata.inductor.codegen.triton.horizontal import fuse_horizontally
from torchstrata.inductor.codegen.triton.partials import fuse_partials
from torchstrata.inductor.codegen.triton.size_buckets import symbol_params
from torchstrata.inductor.codegen.triton.split_sums import split_long_sums
from torchstrata.inductor.codegen.triton.tails import fuse_tails
from torchstrata.inductor.schedule.plan_passes import PlanPass, Step


class SplitLongSums(GraphPass):
    """Sums over long leading dims in two levels (the C++ backend walks them itself);
    ``partials``: a row kernel will host the first level (``triton.fuse_partials`` runs)."""

    name = "triton.split_long_sums"
    after = ("inductor.cse",)
    before = ("inductor.dce",)

    def __init__(self, partials: bool = True) -> None:
        self.partials = partials

    def __call__(self, graph: Graph) -> Graph:
        return split_long_sums(graph, self.partials and not symbol_params())


class FusePartials(PlanPass):
    """Column partial sums fused into the row kernel that reads the same rows."""

    name = "triton.fuse_partials"

    def __call__(self, steps: Sequence[Step]) -> Sequence[Step]:
        return steps if symbol_params() else fuse_partials(steps)


class FuseTails(PlanPass):
    """A full reduction over a row kernel's rows, finished by its last program."""

    name = "triton.fuse_tails"

    def __call__(self, steps: Sequence[Step]) -> Sequence[Step]:
        return steps if symbol_params() else fuse_tails(steps)


class FuseHorizontally(PlanPass):
    """Consecutive small independent pointwise kernels as one launch."""

    name = "triton.fuse_horizontally"

    def __call__(self, steps: Sequence[Step]) -> Sequence[Step]:
        return fuse_horizontally(steps)


def triton_graph_passes(options: InductorOptions) -> tuple[GraphPass, ...]:
    """The Triton backend's graph passes beyond the common ones."""
    return (SplitLongSums(partials=options.partials),)


def triton_plan_passes(options: InductorOptions) -> tuple[PlanPass, ...]:
    """The Triton backend's plan passes, in order, as ``options`` switch them."""
    passes: list[PlanPass] = []
    if options.partials:
        passes.append(FusePartials())
    if options.tails:
        passes.append(FuseTails())
    passes.append(FuseHorizontally())
    return tuple(passes)
