"""The rewrites before lowering as named core :class:`~torchstrata.core.GraphPass` es.

:func:`common_passes` is what every backend gets; a backend adds its own through its
``graph_passes()`` (the Triton backend: :mod:`~torchstrata.inductor.codegen.triton.passes`).
``compile_graph`` runs them all through core's :class:`~torchstrata.core.PassManager`, so
each is ordered by its declared ``after``/``before``, timed, verified between passes
(``CompileOptions.debug``), validated on random inputs (``validate_passes``) and skipped
when its name is in ``blocked_plugins``, like a plugin's passes.
"""

from __future__ import annotations

from torchstrata.core import Graph, GraphPass, eliminate_common_subexpressions, eliminate_dead_code
from torchstrata.inductor.passes.channels_last_convs import channels_last_convolutions
from torchstrata.inductor.passes.counts import narrow_counts
from torchstrata.inductor.passes.factored_sums import factor_sums
from torchstrata.inductor.passes.grouped_attention import grouped_query_attention
from torchstrata.inductor.passes.identity_views import drop_identity_views
from torchstrata.inductor.passes.one_hot import one_hot_sums
from torchstrata.inductor.passes.rewrites import gather_as_reduction
from torchstrata.inductor.passes.row_scatters import row_scatters
from torchstrata.inductor.passes.scatter_sums import scatter_into_addends


class GatherAsReduction(GraphPass):
    """Gathers of one element per row, and one-hot selections, as fusible reductions."""

    name = "inductor.gather_as_reduction"

    def __call__(self, graph: Graph) -> Graph:
        return gather_as_reduction(graph)


class OneHotSums(GraphPass):
    """``sum(where(iota == index, v, 0))`` as the selected element."""

    name = "inductor.one_hot_sums"
    after = ("inductor.gather_as_reduction",)

    def __call__(self, graph: Graph) -> Graph:
        return one_hot_sums(graph)


class NarrowCounts(GraphPass):
    """Counts of a mask accumulated in 32 bits."""

    name = "inductor.narrow_counts"
    after = ("inductor.one_hot_sums",)

    def __call__(self, graph: Graph) -> Graph:
        return narrow_counts(graph)


class FactorSums(GraphPass):
    """Per-row factors taken out of a sum that repeats one already computed."""

    name = "inductor.factor_sums"
    after = ("inductor.narrow_counts",)

    def __call__(self, graph: Graph) -> Graph:
        return factor_sums(graph)


class MergeCommonSubexpressions(GraphPass):
    """The sums that ``factor_sums`` made equal, merged."""

    name = "inductor.cse"
    after = ("inductor.factor_sums",)

    def __call__(self, graph: Graph) -> Graph:
        return eliminate_common_subexpressions(graph)


class DropIdentityViews(GraphPass):
    """Permutes that undo the permute they read, replaced by its operand (a weight's
    gradient ``t(t(mm))`` was a copy kernel)."""

    name = "inductor.identity_views"
    after = ("inductor.cse",)

    def __call__(self, graph: Graph) -> Graph:
        return drop_identity_views(graph)


class ScatterIntoAddends(GraphPass):
    """``add(scatter_add(zeros, d, i, s), y)`` as ``scatter_add(y, d, i, s)``: a tied
    embedding's gradient accumulated into the head's half, no zero fill, no add kernel."""

    name = "inductor.scatter_sums"
    after = ("inductor.identity_views",)

    def __call__(self, graph: Graph) -> Graph:
        return scatter_into_addends(graph)


class RowScatters(GraphPass):
    """A ``scatter_add`` of whole rows (an embedding's gradient) as ATen's ``index_add``:
    no index kernel, a tenth of the scatter's time."""

    name = "inductor.row_scatters"
    after = ("inductor.scatter_sums",)

    def __call__(self, graph: Graph) -> Graph:
        return row_scatters(graph)


class GroupedQueryAttention(GraphPass):
    """CPU flash attention reads grouped-query key/value heads unrepeated: no copy of
    each head for its group (decision 0232)."""

    name = "inductor.grouped_query_attention"
    after = ("inductor.row_scatters",)

    def __call__(self, graph: Graph) -> Graph:
        return grouped_query_attention(graph)


class DropDeadCode(GraphPass):
    """Nodes no output needs any more, dropped: the last pass before lowering."""

    name = "inductor.dce"
    after = ("inductor.grouped_query_attention",)

    def __call__(self, graph: Graph) -> Graph:
        return eliminate_dead_code(graph)


class ChannelsLastConvolutions(GraphPass):
    """CPU 2-D convolutions on channels-last inputs, their results read in that layout
    (the C++ backend's pass; decision 0230)."""

    name = "cpp.channels_last_convolutions"
    after = ("inductor.grouped_query_attention",)
    before = ("inductor.dce",)

    def __call__(self, graph: Graph) -> Graph:
        return channels_last_convolutions(graph)


def common_passes() -> tuple[GraphPass, ...]:
    """The rewrites before lowering that every backend gets, in order."""
    return (
        GatherAsReduction(),
        OneHotSums(),
        NarrowCounts(),
        FactorSums(),
        MergeCommonSubexpressions(),
        DropIdentityViews(),
        ScatterIntoAddends(),
        RowScatters(),
        GroupedQueryAttention(),
        DropDeadCode(),
    )
