"""``torch.compile(model, backend="torchstrata")``: training steps through the autograd
stage (generated kernels forward and backward), options, explain, a second shape.

Dynamo is the harness here (tests may call ``torch.compile``); compiles are slow on a
2-core machine, so the models are tiny and each test compiles once or twice.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import torchstrata.runtime as rt
from torchstrata.core import CompiledGraph
from torchstrata.runtime.dynamo_record import recording

from .models import MLP, TransformerBlock, assert_matches, step, twin


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch.compiler.reset()
    yield
    torch.compiler.reset()


def _train_and_check(model: torch.nn.Module, x: torch.Tensor) -> None:
    """One training step through the backend: output and every gradient as eager's,
    and both directions ran generated kernels."""
    reference = twin(model)
    compiled = torch.compile(model, backend="torchstrata")
    with recording() as graphs:
        out, got = step(compiled, model, [x])
    want_out, want = step(reference, reference, [x.detach().clone().requires_grad_()])
    assert_matches([out], [want_out], what="output")
    assert_matches(got, want, what="grad")
    assert len(graphs) == 1 and graphs[0].is_compiled
    artifacts = graphs[0].artifacts
    assert isinstance(artifacts.compiled, CompiledGraph) and artifacts.compiled.kernels
    # The backward was built because the engine called it, and it is generated code
    # (the fixture turns an interpreter fallback into an error).
    assert artifacts.backward_fn is not None and artifacts.backward_fn.built
    assert isinstance(artifacts.backward_fn.get(), CompiledGraph)
    assert artifacts.backward_compiled.kernels
    assert compiled(x).grad_fn.name() == "CompiledGraphFunctionBackward"


def test_mlp_training_step_runs_generated_kernels_both_ways():
    _train_and_check(MLP(), torch.randn(4, 16, requires_grad=True))


def test_transformer_block_training_step_matches_eager():
    _train_and_check(TransformerBlock(dim=16, heads=2), torch.randn(2, 5, 16, requires_grad=True))


def test_explain_reports_graphs_kernels_and_dynamo_guards():
    model = MLP()
    compiled = torch.compile(model, backend="torchstrata")
    x = torch.randn(4, 16)
    report = rt.explain(compiled, x)
    assert report.graph_count == 1 and not report.fallback
    assert report.kernels and all(kernel.source for kernel in report.kernels)
    # Dynamo's own wording: the input's tensor guard (its source naming is Dynamo's).
    assert any(guard.startswith("TENSOR_MATCH: L[") for guard in report.dynamo_guards)
    assert any(guard.startswith("GRAD_MODE") for guard in report.dynamo_guards)
    assert "Dynamo guard(s)" in str(report)
    # with the values they check, and the stages timed as the call compiled them
    assert "TENSOR_MATCH: L['x']: Tensor, shape == (4, 16), stride == (16, 1)" in str(report)
    assert [stage for stage, _ in report.stage_seconds][:3] == ["autograd", "decomp", "codegen"]


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = 0.1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * self.scale


def test_explain_dynamo_shows_the_constant_a_guard_checks():
    report = rt.explain(torch.compile(Scaled(), backend="torchstrata"), torch.randn(8))
    assert "CONSTANT_MATCH: L['self'].scale == 0.1" in report.dynamo_guards


def test_options_are_honoured_and_unknown_ones_rejected():
    def fn(x):
        return torch.tanh(x) * 2

    x = torch.randn(8)
    eager_codegen = torch.compile(fn, backend="torchstrata", options={"codegen": "eager"})
    report = rt.explain(eager_codegen, x)
    assert report.graph_count == 1 and report.prims_graphs == (None,) and not report.kernels
    torch.testing.assert_close(eager_codegen(x), fn(x))
    with pytest.raises(Exception, match=r"unknown option\(s\) \['triton.cudagraphs'\]"):
        torch.compile(fn, backend="torchstrata", options={"triton.cudagraphs": True})(x)
    no_graphs = torch.compile(fn, backend="torchstrata", mode="max-autotune-no-cudagraphs")
    torch.testing.assert_close(no_graphs(x), fn(x))  # a mode torchstrata compiles as default


def test_a_second_shape_is_lowered_per_size_without_a_dynamo_recompile():
    def fn(x):
        rows, cols = x.size()  # sizes computed in the graph: folded per size
        return torch.relu(x).reshape(rows * cols) * rows

    compiled = torch.compile(fn, backend="torchstrata")
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no eager fallback, no warning of any kind
        for rows in (3, 5, 7, 5, 3):
            x = torch.randn(rows, 4)
            with recording() as graphs:
                torch.testing.assert_close(compiled(x), fn(x))
            assert len(graphs) == 1 and graphs[0].is_compiled
            seen.append(graphs[0])
    # 3 is static; 5 arrives with a symbolic size, and that one graph serves 7 and 3
    # as well (lowered for each size; Dynamo tries its newest entry first): its guards
    # stay symbolic (no Eq(s, 5))
    assert seen[1] is seen[2] is seen[3] is seen[4] and seen[0] is not seen[1]
    assert not any("SHAPE_ENV: Eq(" in guard for guard in seen[1].dynamo_guards)


def test_a_size_marked_dynamic_is_compiled_per_size():
    def fn(x):
        return torch.relu(x) + 1

    compiled = torch.compile(fn, backend="torchstrata")
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for rows in (3, 6, 9):
            x = torch.randn(rows, 4)
            torch._dynamo.mark_dynamic(x, 0)
            with recording() as graphs:
                torch.testing.assert_close(compiled(x), fn(x))
            assert len(graphs) == 1 and graphs[0].is_compiled
