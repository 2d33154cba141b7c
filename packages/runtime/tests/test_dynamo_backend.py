"""The Dynamo backend entry point: FX graph in, our stages, a callable out."""

from __future__ import annotations

import importlib.metadata

import pytest
import torch
import torch.fx
import torch.nn.functional as F

import torchstrata.runtime as rt
from torchstrata.core import CompileOptions, hookimpl
from torchstrata.runtime import dynamo_backend
from torchstrata.runtime.dynamo_backend import torchstrata_backend
from torchstrata.runtime.dynamo_explain import dynamo_report
from torchstrata.runtime.dynamo_options import backend_options


def demo_fn(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.softmax(F.gelu(x + b), -1)


def test_backend_runs_fx_graph_and_keeps_output_structure(recwarn):
    gm = torch.fx.symbolic_trace(lambda x, b: (demo_fn(x, b), x - b))
    x, b = torch.randn(4, 8), torch.randn(8)
    compiled = torchstrata_backend(gm, [x, b])
    result = compiled(x, b)
    assert isinstance(result, tuple) and len(result) == 2
    torch.testing.assert_close(result[0], demo_fn(x, b))
    torch.testing.assert_close(result[1], x - b)


def test_backend_falls_back_to_fx_forward():
    module = torch.fx.symbolic_trace(torch.nn.Linear(3, 2))  # get_attr nodes: not importable
    x = torch.randn(1, 3)
    with pytest.warns(rt.TorchstrataFallbackWarning, match="dynamo backend.*FxImportError"):
        compiled = torchstrata_backend(module, [x])
    assert not compiled.is_compiled and "get_attr" in compiled.eager_reason
    torch.testing.assert_close(compiled(x), module(x))
    report = dynamo_report([compiled])
    assert "graph 0 runs eagerly" in report.fallback and report.eager_ops


@pytest.fixture
def fake_backend(monkeypatch, stages):
    """The backend driving the fake stages of ``conftest.py``."""
    monkeypatch.setattr(dynamo_backend, "_PIPELINE", stages.pipeline)
    return stages


def test_a_failing_stage_runs_that_graph_eagerly_with_a_warning(fake_backend):
    fake_backend.aot.error = RuntimeError("aot exploded")
    gm = torch.fx.symbolic_trace(demo_fn)
    x, b = torch.randn(4, 8), torch.randn(8)
    with pytest.warns(rt.TorchstrataFallbackWarning, match="aot exploded; running this graph"):
        compiled = torchstrata_backend(gm, [x, b])
    torch.testing.assert_close(compiled(x, b), demo_fn(x, b))
    with pytest.raises(rt.CompilationError, match="aot exploded"):
        torchstrata_backend(gm, [x, b], options={"fullgraph": True})


def test_compiled_code_failing_on_its_first_call_falls_back(fake_backend):
    fake_backend.codegen.crash_at_run = True
    gm = torch.fx.symbolic_trace(demo_fn)
    x, b = torch.randn(4, 8), torch.randn(8)
    compiled = torchstrata_backend(gm, [x, b])
    assert compiled.is_compiled
    with pytest.warns(rt.TorchstrataFallbackWarning, match="kernel crashed"):
        torch.testing.assert_close(compiled(x, b), demo_fn(x, b))
    assert not compiled.is_compiled
    torch.testing.assert_close(compiled(x, b), demo_fn(x, b))


class OptionsSpy:
    """Records the options every pass hook is called with."""

    def __init__(self) -> None:
        self.seen: list[CompileOptions] = []

    @hookimpl
    def torchstrata_graph_passes(self, stage, options):
        self.seen.append(options)
        return []


def test_options_reach_the_stages(monkeypatch, make_stages):
    spy = OptionsSpy()
    stages = make_stages(extra=(("options-spy", spy),))
    monkeypatch.setattr(dynamo_backend, "_PIPELINE", stages.pipeline)
    gm = torch.fx.symbolic_trace(demo_fn)
    x, b = torch.randn(4, 8), torch.randn(8)
    compiled = torchstrata_backend(gm, [x, b], options={"codegen": "eager", "debug": True})
    assert stages.codegen.calls == 0 and compiled.artifacts.prims_graph is None
    assert spy.seen and all(o.codegen == "eager" and o.debug for o in spy.seen)
    torch.testing.assert_close(compiled(x, b), demo_fn(x, b))
    spy.seen.clear()
    torchstrata_backend(gm, [x, b], mode="max-autotune")
    assert stages.codegen.calls == 1
    assert spy.seen and all(o.mode == "max-autotune" for o in spy.seen)


def test_backend_options_map_onto_compile_options():
    base = CompileOptions()
    assert backend_options(base, {}) is base
    assert backend_options(base, {"mode": "reduce-overhead"}).mode == "reduce-overhead"
    given = {"codegen": "cpp", "blocked_plugins": ["x"], "stage_options": {"inductor": {}}}
    options = backend_options(base, {"options": given})
    assert options.codegen == "cpp" and options.blocked_plugins == frozenset({"x"})
    whole = CompileOptions(codegen="eager")
    assert backend_options(base, {"options": whole}) is whole
    shared = backend_options(base, {"options": {"shared_decomposition_from": 2}})
    assert shared.shared_decomposition_from == 2


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"options": {"triton.cudagraphs": True, "epilogue_fusion": 1}}, "epilogue_fusion"),
        ({"options": {"dynamic": True}}, "pass dynamic= to torch.compile"),
        ({"options": {"recompile_limit": 2}}, "recompile_limit"),
        ({"options": {"codegen": 3}}, "codegen=3"),
        ({"options": ["codegen"]}, "must be a dict"),
        ({"mode": "fastest"}, "fastest"),
        ({"dynamic": True}, r"unknown keyword argument\(s\) \['dynamic'\]"),
    ],
)
def test_backend_options_reject_what_they_cannot_honour(given, message):
    with pytest.raises(rt.BackendOptionError, match=message):
        backend_options(CompileOptions(), given)


def test_backend_entry_point_is_declared():
    points = importlib.metadata.entry_points(group="torch_dynamo_backends")
    assert any(p.name == "torchstrata" and p.value.endswith(":torchstrata_backend") for p in points)


def test_under_autocast_the_fx_graph_runs_as_it_is():
    """Dynamo's graph holds no autocast casts: compiled with autocast off it would come
    back float32 where eager gives bfloat16."""

    def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w) + 1

    gm = torch.fx.symbolic_trace(linear)
    x, w = torch.randn(4, 8), torch.randn(3, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.warns(rt.TorchstrataFallbackWarning, match="autocast is enabled"):
            compiled = torchstrata_backend(gm, [x, w])
        result, expected = compiled(x, w), linear(x, w)
    assert result.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(result, expected)
