"""compile() and explain() over the real, installed stages (nox installs all packages)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as rt
from torchstrata.capture import graph_break
from torchstrata.core import Level


def demo_fn(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.softmax(F.gelu(x + b), -1)


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(128, 256)
        self.fc2 = torch.nn.Linear(256, 128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc2(F.gelu(self.fc1(x))), -1)


@pytest.fixture(autouse=True)
def _no_fallback_warnings():
    rt.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        yield
    rt.reset()


@pytest.mark.parametrize("codegen", [None, "eager"])
def test_demo_function_matches_eager_in_one_kernel(codegen):
    x, b = torch.randn(64, 128), torch.randn(128)
    compiled = rt.compile(demo_fn, codegen=codegen)
    torch.testing.assert_close(compiled(x, b), demo_fn(x, b))
    report = rt.explain(compiled, x, b)
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert [op.name for op in report.aten_graphs[0].ops()] == [
        "aten.add.Tensor",
        "aten.gelu.default",
        "aten._softmax.default",
    ]
    if codegen is None:
        assert report.prims_graphs[0].level is Level.PRIMS
        assert len(report.kernels) == 1 and report.kernels[0].source


def test_mlp_inference_matches_eager_and_follows_parameter_updates():
    model = MLP().eval()
    compiled = rt.compile(model)
    x = torch.randn(32, 128)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        model.fc1.weight.mul_(0.5)
        torch.testing.assert_close(compiled(x), model(x))
        torch.testing.assert_close(compiled(x[:8]), model(x[:8]))  # recompiles for the new shape
    report = rt.explain(compiled, x)
    assert report.kernels and report.eager_ops  # matmuls stay extern ATen calls


def test_graph_break_is_reported_and_results_stay_right():
    def with_break(x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        graph_break()
        return y.cos()

    x = torch.randn(8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rt.TorchstrataFallbackWarning)
        torch.testing.assert_close(rt.compile(with_break)(x), x.sin().cos())
        report = rt.explain(with_break, x)
    assert report.graph_break_count >= 1
    assert all(b.reason and b.filename and b.lineno for b in report.graph_breaks)
    with pytest.raises(rt.CompilationError):
        rt.compile(with_break, fullgraph=True)(x)


def test_dynamo_backend_entry_point():
    x, b = torch.randn(64, 128), torch.randn(128)
    compiled = torch.compile(demo_fn, backend="torchstrata")  # Dynamo as the harness only
    torch.testing.assert_close(compiled(x, b), demo_fn(x, b))


def test_mlp_training_step_matches_eager_gradients():
    torch.manual_seed(0)
    model, reference = MLP(), MLP()
    reference.load_state_dict(model.state_dict())
    compiled = rt.compile(model)
    x, weights = torch.randn(16, 128), torch.arange(128.0)
    out = compiled(x)
    assert out.grad_fn is not None
    (out * weights).sum().backward()
    (reference(x) * weights).sum().backward()
    for (name, param), ref_param in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(param.grad, ref_param.grad, msg=name)


@pytest.mark.parametrize("codegen", [None, "eager"])
def test_output_views_of_offset_input_views_alias_the_right_elements(codegen):
    # Regression: an output that is a view of an input that itself starts at a storage
    # offset must read from that offset (found by the OpInfo sweep through capture).
    def positive(t):
        return torch.positive(t)

    def second_row(t):
        return t.view(2, 2)[1]

    x = torch.arange(8.0).reshape(4, 2)[:, 1]
    y = torch.arange(9.0)[1:5]
    for fn, value in ((positive, x), (second_row, y)):
        out = rt.compile(fn, codegen=codegen)(value)
        torch.testing.assert_close(out, fn(value))
        assert out.data_ptr() == fn(value).data_ptr()  # a real view, as in eager


@pytest.mark.parametrize("codegen", [None, "eager"])
def test_as_strided_of_an_offset_input_view_reads_eagers_elements(codegen):
    # as_strided offsets are absolute in the storage: the output must not be rebuilt as a
    # view relative to the input's own offset (found by the OpInfo sweep).
    def fn(t):
        return t.as_strided((2, 2), (1, 2), 1)

    x = torch.randn(12)[3:].view(3, 3)
    torch.testing.assert_close(rt.compile(fn, codegen=codegen)(x), fn(x))


def test_a_module_container_that_grows_after_compiling_recompiles():
    # Silent-wrong-result regression: the loops over a Sequential, a ModuleList and a
    # ModuleDict were unrolled without guarding their length, so an appended module was
    # ignored by the compiled code.
    torch.manual_seed(0)
    seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    layers = torch.nn.ModuleList([torch.nn.Linear(4, 4)])
    named = torch.nn.ModuleDict({"a": torch.nn.Linear(4, 4)})

    def through_list(x):
        for layer in layers:
            x = layer(x)
        return x

    def through_dict(x):
        for key in named:
            x = named[key](x)
        return x

    x = torch.randn(2, 4)
    compiled = [rt.compile(fn) for fn in (seq, through_list, through_dict)]
    with torch.no_grad():
        for fn, eager in zip(compiled, (seq, through_list, through_dict), strict=True):
            torch.testing.assert_close(fn(x), eager(x))
        seq.append(torch.nn.Linear(4, 3))
        layers.append(torch.nn.Linear(4, 2))
        named["b"] = torch.nn.Linear(4, 5)
        for fn, eager in zip(compiled, (seq, through_list, through_dict), strict=True):
            torch.testing.assert_close(fn(x), eager(x))


def test_a_parameter_added_after_compiling_is_seen():
    module = torch.nn.Module()
    module.a = torch.nn.Parameter(torch.ones(3))

    def total(x):
        for parameter in module.parameters():
            x = x + parameter.sum()
        return x

    compiled = rt.compile(total)
    x = torch.zeros(())
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), total(x))
        module.b = torch.nn.Parameter(torch.full((2,), 10.0))
        torch.testing.assert_close(compiled(x), total(x))
