"""The inductor's rewrites are named passes: run in order, recorded, blockable by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torchstrata.core import CompileOptions, format_graph, interpret, parse
from torchstrata.inductor import compile_graph
from torchstrata.inductor.codegen.backend import CppBackend
from torchstrata.inductor.compile import schedule_graph
from torchstrata.inductor.ir.kernel import Kernel

COMMON = [
    "inductor.gather_as_reduction",
    "inductor.one_hot_sums",
    "inductor.narrow_counts",
    "inductor.factor_sums",
    "inductor.cse",
    "inductor.identity_views",
    "inductor.scatter_sums",
    "inductor.row_scatters",
    "inductor.grouped_query_attention",
    "inductor.dce",
]
#: the C++ backend's own graph pass, before the dead code goes
CPP = [*COMMON[:-1], "cpp.channels_last_convolutions", "inductor.dce"]


def _cross_entropy_rows():
    """F.cross_entropy's prims graph (of the golden corpus): the gather of a log-softmax
    becomes a reduction over the row."""
    return parse((Path(__file__).parent / "golden" / "cross_entropy_fwd.prims").read_text())


def _inputs():
    generator = torch.Generator().manual_seed(0)
    return torch.randn(8, 32, generator=generator), torch.randint(0, 32, (8,), generator=generator)


def test_cpp_runs_the_common_passes_in_order(tmp_path):
    compiled = compile_graph(_cross_entropy_rows(), "cpu", CompileOptions(codegen="cpp"))
    assert [record.name for record in compiled.stats["passes"]] == CPP
    assert {record.stage for record in compiled.stats["passes"]} == {"inductor"}


@pytest.mark.triton
def test_triton_adds_its_own_graph_and_plan_passes():
    options = CompileOptions(codegen="triton")
    names = [
        record.name
        for record in compile_graph(_cross_entropy_rows(), "cpu", options).stats["passes"]
    ]
    assert names == [
        *COMMON[:9],
        "triton.split_long_sums",
        "inductor.dce",
        "triton.fuse_partials",
        "triton.fuse_tails",
        "triton.fuse_horizontally",
    ]


def test_a_blocked_pass_does_not_run_and_results_stay_right():
    graph = _cross_entropy_rows()
    fused = schedule_graph(graph, CppBackend(), CompileOptions())
    blocked_options = CompileOptions(blocked_plugins={"inductor.gather_as_reduction"})
    blocked = schedule_graph(graph, CppBackend(), blocked_options)
    assert "inductor.gather_as_reduction" not in [record.name for record in blocked.records]
    (rewrite,) = [r for r in fused.records if r.name == "inductor.gather_as_reduction"]
    assert rewrite.nodes_after != rewrite.nodes_before
    assert format_graph(blocked.graph) != format_graph(fused.graph)
    inputs = _inputs()
    (expected,) = interpret(graph, *inputs)
    for options in (
        CompileOptions(codegen="cpp"),
        blocked_options.__class__(codegen="cpp", blocked_plugins={"inductor.gather_as_reduction"}),
    ):
        (actual,) = compile_graph(graph, "cpu", options)(*inputs)
        torch.testing.assert_close(actual, expected)


def test_passes_are_validated_when_asked():
    options = CompileOptions(codegen="cpp", validate_passes=True, debug=True)
    scheduled = schedule_graph(_cross_entropy_rows(), CppBackend(), options)
    assert [step for step in scheduled.plan.steps if isinstance(step, Kernel)]
    assert [record.name for record in scheduled.records] == CPP
