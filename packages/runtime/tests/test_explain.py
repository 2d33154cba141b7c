"""explain(): graphs at every level, breaks, guards, kernels, eager ops; no cache use."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as rt
from torchstrata.core import GraphBreak, GuardKind, Level


def demo_fn(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.softmax(F.gelu(x + b), -1)


def test_explain_reports_every_field(stages):
    compiled = stages.compile(demo_fn)
    report = rt.explain(compiled, torch.randn(64, 128), torch.randn(128))
    assert isinstance(report, rt.ExplainReport)
    assert report.graph_count == 1 and report.graphs[0].level is Level.TORCH
    assert report.aten_graphs[0].level is Level.ATEN
    assert [op.name for op in report.aten_graphs[0].ops()] == [
        "aten.add.Tensor",
        "aten.gelu.default",
        "aten._softmax.default",
    ]
    assert report.prims_graphs[0] is not None
    assert report.ops_per_graph[0][1:] == ("torch.nn.functional.gelu", "torch.softmax")
    assert [g.kind for g in report.guards] == [GuardKind.TENSOR_MATCH, GuardKind.TENSOR_MATCH]
    assert len(report.kernels) == 1 and "fake kernel" in report.kernels[0].source
    assert report.graph_breaks == () and report.fallback == ""
    text = str(report)
    assert "1 graph(s)" in text and "kernel_0" in text and "L['x']" in text
    assert len(compiled.cache) == 0  # explain neither reads nor fills the cache


def test_explain_graph_breaks_and_eager_ops(make_stages):
    stages = make_stages(codegen=False)
    stages.capture.graph_break = GraphBreak("call to print", "model.py", 3)
    stages.capture.break_with_graph = True
    compiled = rt.compile(demo_fn, pipeline=stages.pipeline)
    with pytest.warns(rt.TorchstrataFallbackWarning, match="torchstrata-inductor is not installed"):
        report = rt.explain(compiled, torch.randn(2, 4), torch.randn(4))
    assert report.graph_break_count == 1
    (graph_break,) = report.graph_breaks
    assert (graph_break.reason, graph_break.filename, graph_break.lineno) == (
        "call to print",
        "model.py",
        3,
    )
    assert report.missing_stages == ("codegen",)
    assert "aten.gelu.default" in report.eager_ops
    assert "break: model.py:3: call to print" in str(report)


def test_explain_reports_stage_failure(stages):
    stages.aot.error = RuntimeError("boom")
    report = rt.explain(
        rt.compile(demo_fn, pipeline=stages.pipeline), torch.randn(2, 4), torch.randn(4)
    )
    assert "autograd failed" in report.fallback and report.graph_count == 1


def test_explain_names_the_guard_that_failed(stages):
    compiled = stages.compile(demo_fn)
    compiled(torch.randn(4, 8), torch.randn(8))
    compiled(torch.randn(5, 8), torch.randn(8))  # recompiles: x's shape changed
    report = rt.explain(compiled, torch.randn(6, 8), torch.randn(8))
    assert len(report.recompile_reasons) == 1
    assert "L['x']" in report.recompile_reasons[0] and "[4, 8]" in report.recompile_reasons[0]
    assert len(report.guard_failures) == 2  # this call fails both cached entries, on x
    assert all("L['x']" in failure for failure in report.guard_failures)
    assert "guard failed" in str(report)
