"""compile(): results match eager, cache hits and misses, recompiles, the limit, options."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as rt
from torchstrata.core import CompileOptions, override_options


def demo_fn(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.softmax(F.gelu(x + b), -1)


def test_result_matches_eager_and_second_call_hits_cache(stages):
    compiled = stages.compile(demo_fn)
    x, b = torch.randn(64, 128), torch.randn(128)
    torch.testing.assert_close(compiled(x, b), demo_fn(x, b))
    torch.testing.assert_close(compiled(x * 2, b), demo_fn(x * 2, b))
    assert stages.capture.calls == 1
    assert stages.codegen.calls == 1
    assert len(compiled.cache) == 1


def test_codegen_gets_first_input_device(stages):
    stages.compile(demo_fn)(torch.randn(2, 3), torch.randn(3))
    assert stages.codegen.devices == [torch.device("cpu")]


def test_shape_change_recompiles_and_logs_failing_guard(stages, caplog):
    compiled = stages.compile(demo_fn)
    compiled(torch.randn(4, 8), torch.randn(8))
    with caplog.at_level(logging.INFO, logger="torchstrata.runtime"):
        out = compiled(torch.randn(5, 8), torch.randn(8))
    torch.testing.assert_close(out.sum(), torch.tensor(5.0))
    assert stages.capture.calls == 2
    assert len(compiled.cache) == 2
    assert "guard failed" in caplog.text and "L['x']" in caplog.text
    compiled(torch.randn(4, 8), torch.randn(8))  # the first entry still serves
    assert stages.capture.calls == 2


def test_dtype_and_constant_changes_recompile(stages):
    def scale(x: torch.Tensor, factor: float = 2.0) -> torch.Tensor:
        return x * factor

    compiled = stages.compile(scale)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 2)
    torch.testing.assert_close(compiled(x, 3.0), x * 3)
    torch.testing.assert_close(compiled(x.double()), x.double() * 2)
    assert stages.capture.calls == 3


def test_recompile_limit_warns_once_and_runs_eagerly(stages):
    compiled = stages.compile(demo_fn, options={"recompile_limit": 2})
    for dtype in (torch.float32, torch.float64):
        compiled(torch.randn(2, 4, dtype=dtype), torch.randn(4, dtype=dtype))
    with pytest.warns(rt.TorchstrataFallbackWarning, match="recompile limit reached.*L\\['x'\\]"):
        out = compiled(torch.randn(3, 4).half(), torch.randn(4).half())
    assert out.shape == (3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled(torch.randn(6, 4).bfloat16(), torch.randn(4).bfloat16())
    assert stages.capture.calls == 2


def test_reset_clears_entries(stages):
    compiled = stages.compile(demo_fn)
    x, b = torch.randn(2, 3), torch.randn(3)
    compiled(x, b)
    rt.reset()
    assert len(compiled.cache) == 0
    compiled(x, b)
    assert stages.capture.calls == 2


def test_grad_mode_is_part_of_the_key(stages):
    compiled = stages.compile(demo_fn)
    x, b = torch.randn(2, 3), torch.randn(3)
    compiled(x, b)
    with torch.no_grad():
        compiled(x, b)
    assert stages.capture.calls == 2
    with torch.no_grad():  # (explain compiles afresh)
        assert rt.explain(compiled, x, b).guard_failures == (
            "global torch state: grad mode changed from True to False",
        )
    assert compiled.recompile_reasons == [
        "global torch state: grad mode changed from True to False"
    ]


def test_a_state_the_compiler_cannot_reproduce_runs_eagerly_without_recompiling(stages):
    class Doubling(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return out * 2 if func is torch.softmax else out

    compiled = stages.compile(demo_fn)
    x, b = torch.randn(2, 3), torch.randn(3)
    with pytest.warns(
        rt.TorchstrataFallbackWarning, match=r"TorchFunctionMode \(.*Doubling\) is active"
    ):
        for _ in range(3):
            with Doubling():
                result = compiled(x, b)
                torch.testing.assert_close(result, demo_fn(x, b))
    torch.testing.assert_close(result, 2 * torch.softmax(F.gelu(x + b), -1))
    assert stages.capture.calls == 0 and len(compiled.cache) == 1
    with pytest.raises(rt.CompilationError, match="TorchFunctionMode"), Doubling():
        stages.compile(demo_fn, fullgraph=True)(x, b)


def test_inputs_requiring_grad_keep_autograd_history(stages):
    compiled = stages.compile(demo_fn)
    x = torch.randn(2, 3, requires_grad=True)
    b = torch.randn(3)
    out = compiled(x, b)
    (out * torch.arange(3.0)).sum().backward()
    expected_x = x.detach().clone().requires_grad_()
    (demo_fn(expected_x, b) * torch.arange(3.0)).sum().backward()
    torch.testing.assert_close(x.grad, expected_x.grad)


def test_module_parameters_are_read_at_every_call(make_stages):
    stages = make_stages(linear=True)
    module = torch.nn.Linear(4, 3)
    compiled = stages.compile(module)
    assert isinstance(compiled, rt.CompiledModule)
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), module(x))
        module.weight.mul_(2)  # in place: same guards, new values
        torch.testing.assert_close(compiled(x), module(x))
        assert stages.capture.calls == 1
        module.weight = torch.nn.Parameter(torch.randn(3, 4, dtype=torch.float64))
        module.bias = torch.nn.Parameter(torch.randn(3, dtype=torch.float64))
        torch.testing.assert_close(compiled(x.double()), module(x.double()))
    assert stages.capture.calls == 2
    assert list(compiled.parameters()) == list(module.parameters())
    assert compiled.in_features == 4
    assert module(x.double()).shape == (2, 3)  # the original stays usable


def test_decorator_form_and_options_precedence(stages):
    @rt.compile(codegen="eager", pipeline=stages.pipeline)
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    assert isinstance(double, rt.CompiledFunction)
    assert double.options.codegen == "eager"
    torch.testing.assert_close(double(torch.ones(2)), torch.full((2,), 2.0))
    assert stages.codegen.calls == 0  # eager codegen stops at ATen graphs
    compiled = rt.compile(
        demo_fn, codegen="cpp", options=CompileOptions(codegen="triton", debug=True)
    )
    assert compiled.options.codegen == "cpp" and compiled.options.debug
    with override_options(validate_passes=True):
        assert rt.compile(demo_fn).options.validate_passes


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="codegen=''"):
        rt.compile(demo_fn, codegen="")
    with pytest.raises(ValueError, match="mode="):
        rt.compile(demo_fn, mode="fastest")
    with pytest.raises(TypeError, match=r"function or nn\.Module"):
        rt.compile(42)
    with pytest.raises(TypeError, match="unknown compile option"):
        rt.compile(demo_fn, options={"codgen": "cpp"})
    with pytest.raises(TypeError, match="options must be"):
        rt.compile(demo_fn, options=["cpp"])


def test_a_bad_call_raises_the_functions_own_error(stages):
    compiled = stages.compile(demo_fn)
    with pytest.raises(TypeError):
        compiled(torch.randn(2))
    assert stages.capture.calls == 0


def test_graphs_compiled_under_no_grad_require_no_grad(make_stages):
    stages = make_stages(linear=True)
    module = torch.nn.Linear(4, 3)
    with torch.no_grad():
        stages.compile(module)(torch.randn(2, 4))
    (graph,) = stages.aot.graphs
    assert not any(meta.requires_grad for meta in graph.input_metas)
    assert module.weight.requires_grad


def test_explain_shows_the_stage_options():
    from torchstrata.core import InductorOptions

    options = CompileOptions(inductor=InductorOptions(tails=False))
    text = str(rt.explain(rt.compile(demo_fn, options=options), torch.randn(4, 8), torch.randn(8)))
    assert "inductor options: InductorOptions(tails=False," in text
    assert "autograd options: AutogradOptions(unit_grads=True)" in text
