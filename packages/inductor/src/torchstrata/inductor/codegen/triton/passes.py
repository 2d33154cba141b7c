"""The rewrites only the Triton backend asks for: long column sums split before lowering,
and tails, column partials and horizontal fusion applied to the plan."""

from __future__ import annotations

from collections.abc import Sequence

from torchstrata.core import Graph, GraphPass
from torchstrata.inductor.codegen.triton.horizontal import fuse_horizontally
from torchstrata.inductor.codegen.triton.partials import fuse_partials
from torchstrata.inductor.codegen.triton.split_sums import split_long_sums
from torchstrata.inductor.codegen.triton.tails import fuse_tails
from torchstrata.inductor.schedule.plan_passes import PlanPass, Step


class SplitLongSums(GraphPass):
    """Sums over long leading dims in two levels (the C++ backend walks them itself)."""

    name = "triton.split_long_sums"
    after = ("inductor.cse",)
    before = ("inductor.dce",)

    def __call__(self, graph: Graph) -> Graph:
        return split_long_sums(graph)


class FusePartials(PlanPass):
    """Column partial sums fused into the row kernel that reads the same rows."""

    name = "triton.fuse_partials"

    def __call__(self, steps: Sequence[Step]) -> Sequence[Step]:
        return fuse_partials(steps)


class FuseTails(PlanPass):
    """A full reduction over a row kernel's rows, finished by its last program."""

    name = "triton.fuse_tails"

    def __call__(self, steps: Sequence[Step]) -> Sequence[Step]:
        return fuse_tails(steps)


class FuseHorizontally(PlanPass):
    """Consecutive small independent pointwise kernels as one launch."""

    name = "triton.fuse_horizontally"

    def __call__(self, steps: Sequence[Step]) -> Sequence[Step]:
        return fuse_horizontally(steps)


def triton_graph_passes() -> tuple[GraphPass, ...]:
    """The Triton backend's graph passes beyond the common ones."""
    return (SplitLongSums(),)


def triton_plan_passes() -> tuple[PlanPass, ...]:
    """The Triton backend's plan passes, in order."""
    return (FusePartials(), FuseTails(), FuseHorizontally())
