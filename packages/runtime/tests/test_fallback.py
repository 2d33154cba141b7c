"""Eager fallback: stage failures, missing stages, graph breaks, fullgraph=True."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as rt
from torchstrata.core import GraphBreak


def demo_fn(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.softmax(F.gelu(x + b), -1)


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 8), torch.randn(8)


def test_stage_exception_warns_and_runs_eagerly_once_per_guard_set(stages):
    stages.aot.error = RuntimeError("boom in aot")
    compiled = stages.compile(demo_fn)
    x, b = inputs()
    with pytest.warns(rt.TorchstrataFallbackWarning, match="stage 'autograd' failed.*boom in aot"):
        out = compiled(x, b)
    torch.testing.assert_close(out, demo_fn(x, b))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled(x, b)  # the decision is cached under the capture's guards
    assert stages.aot.calls == 1
    with pytest.warns(rt.TorchstrataFallbackWarning):
        compiled(torch.randn(2, 8), b)  # a new guard set tries again
    assert stages.aot.calls == 2


def test_capture_exception_falls_back(stages):
    stages.capture.error = ValueError("unsupported bytecode")
    compiled = stages.compile(demo_fn)
    x, b = inputs()
    with pytest.warns(
        rt.TorchstrataFallbackWarning, match="'capture' failed.*unsupported bytecode"
    ):
        torch.testing.assert_close(compiled(x, b), demo_fn(x, b))


def test_fullgraph_reraises_stage_failure_as_compilation_error(stages):
    stages.aot.error = RuntimeError("boom in aot")
    compiled = stages.compile(demo_fn, fullgraph=True)
    with pytest.raises(rt.CompilationError, match=r"'autograd' failed.*boom") as info:
        compiled(*inputs())
    assert info.value.stage == "autograd"
    assert isinstance(info.value.__cause__, RuntimeError)


def test_compiled_code_failing_on_first_run_falls_back(stages):
    stages.codegen.crash_at_run = True
    compiled = stages.compile(demo_fn)
    x, b = inputs()
    with pytest.warns(rt.TorchstrataFallbackWarning, match="'program' failed.*kernel crashed"):
        torch.testing.assert_close(compiled(x, b), demo_fn(x, b))
    torch.testing.assert_close(compiled(x, b), demo_fn(x, b))
    assert stages.codegen.calls == 1


def test_graph_break_without_graphs_warns_once_per_location(stages):
    stages.capture.graph_break = GraphBreak("call to print", "model.py", 12)
    compiled = stages.compile(demo_fn)
    x, b = inputs()
    with pytest.warns(rt.TorchstrataFallbackWarning, match="model.py:12: call to print"):
        torch.testing.assert_close(compiled(x, b), demo_fn(x, b))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled(x, b)
        rt.compile(demo_fn, pipeline=stages.pipeline)(torch.randn(3, 8), b)  # same location


def test_fullgraph_raises_on_graph_break(stages):
    stages.capture.graph_break = GraphBreak("data-dependent branch", "model.py", 7)
    stages.capture.break_with_graph = True
    with pytest.raises(rt.CompilationError, match=r"graph break at model\.py:7: data-dependent"):
        stages.compile(demo_fn, fullgraph=True)(*inputs())
    stages.capture.break_with_graph = False
    with pytest.raises(rt.CompilationError, match=r"model\.py:7"):
        stages.compile(demo_fn, fullgraph=True)(*inputs())


@pytest.mark.parametrize(
    ("missing", "package"),
    [
        ("aot", "torchstrata-autograd"),
        ("decomp", "torchstrata-decomp"),
        ("codegen", "torchstrata-inductor"),
    ],
)
def test_missing_stage_warns_once_and_interprets(make_stages, missing, package):
    stages = make_stages(**{missing: False})
    compiled = stages.compile(demo_fn)
    x, b = inputs()
    with pytest.warns(rt.TorchstrataFallbackWarning, match=f"{package} is not installed"):
        out = compiled(x, b)
    torch.testing.assert_close(out, demo_fn(x, b))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stages.compile(demo_fn)(x, b)


def test_missing_capture_runs_eagerly(make_stages):
    stages = make_stages(capture=False)
    x, b = inputs()
    with pytest.warns(rt.TorchstrataFallbackWarning, match="torchstrata-capture is not installed"):
        torch.testing.assert_close(stages.compile(demo_fn)(x, b), demo_fn(x, b))
    with pytest.raises(rt.CompilationError, match="capture is not installed"):
        stages.compile(demo_fn, fullgraph=True)(x, b)
