"""Every compile option works or says what it does instead (issue 30, item 5): unknown
keys and wrong types raise naming the option; the ``max-autotune``
modes warn once, naming the option and what it does here."""

from __future__ import annotations

import pathlib
import warnings

import pytest
import torch

import torchstrata.runtime as rt
from torchstrata.core import CompileOptions


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"codgen": "cpp"}, "codgen"),
        ({"fullgraph": True, "recompile_limits": 3}, "recompile_limits"),
        ({"backend": "inductor"}, "backend"),
    ],
)
def test_an_unknown_key_of_options_raises_naming_it(options, named):
    with pytest.raises(TypeError, match=rf"unknown compile option\(s\) \['{named}'\]"):
        rt.compile(double, options=options)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"fullgraph": 1}, "fullgraph=1 must be bool"),
        ({"dynamic": "yes"}, "dynamic='yes' must be bool or None"),
        ({"debug": None}, "debug=None must be bool"),
        ({"validate_passes": "no"}, "validate_passes='no' must be bool"),
        ({"cache_dir": 3}, "cache_dir=3 must be str or PathLike or None"),
        ({"stage_options": [("inductor", {})]}, "stage_options=.* must be Mapping"),
        ({"blocked_plugins": "capture"}, "blocked_plugins='capture' must be a collection"),
        ({"blocked_plugins": [1]}, "blocked_plugins: names must be str"),
        ({"shared_decomposition_from": 2.0}, "shared_decomposition_from=2.0 must be an int"),
        ({"shared_decomposition_from": True}, "shared_decomposition_from=True must be an int"),
    ],
)
def test_an_option_of_the_wrong_type_raises_naming_it(options, named):
    with pytest.raises(TypeError, match=named):
        rt.compile(double, options=options)
    with pytest.raises(TypeError, match=named):
        CompileOptions(**options)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"mode": "fastest"}, "mode='fastest' is not one of"),
        ({"codegen": ""}, "codegen='' must be None or a backend name"),
        ({"options": {"recompile_limit": -1}}, "recompile_limit=-1 must be a non-negative int"),
        ({"options": {"recompile_limit": True}}, "recompile_limit=True must be a non-negative"),
        (
            {"options": {"shared_decomposition_from": 0}},
            "compile option shared_decomposition_from=0 must be 1 or more",
        ),
        (
            {"options": {"symbolic_lowerings": 0}},
            "compile option symbolic_lowerings=0 must be 1 or more",
        ),
    ],
)
def test_a_bad_value_raises_naming_it(arguments, named):
    with pytest.raises(ValueError, match=named):
        rt.compile(double, **arguments)


def test_a_wrong_compile_argument_raises_naming_it():
    with pytest.raises(TypeError, match=r"fullgraph=.* must be bool"):
        rt.compile(double, fullgraph="yes")
    with pytest.raises(TypeError, match=r"dynamic=.* must be bool or None"):
        rt.compile(double, dynamic=1)
    with pytest.raises(TypeError, match="backend"):
        rt.compile(double, backend="inductor")  # type: ignore[call-arg]


def test_a_path_is_a_cache_dir():
    options = CompileOptions(cache_dir=pathlib.Path("/tmp/somewhere"))
    assert str(options.cache_dir) == "/tmp/somewhere"


def test_dynamic_true_without_a_symbolic_capture_compiles_each_shape(stages):
    # The fake capture here makes no symbols: the runtime compiles static per shape,
    # with no warning (symbolic compiles are decision 0200's, tested end to end).
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataOptionWarning)
        compiled = stages.compile(double, dynamic=True)
        for size in (3, 5):
            x = torch.randn(size)
            torch.testing.assert_close(compiled(x), x * 2)
    assert len(compiled.cache) == 2


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("max-autotune", "mode='max-autotune' records CUDA graphs"),
        ("max-autotune-no-cudagraphs", "mode='max-autotune-no-cudagraphs' compiles as"),
    ],
)
def test_the_max_autotune_modes_say_what_they_do(stages, mode, says):
    with pytest.warns(rt.TorchstrataOptionWarning, match=says):
        compiled = stages.compile(double, mode=mode)
    assert compiled.options.mode == mode
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), x * 2)


@pytest.mark.parametrize("mode", [None, "default", "reduce-overhead"])
def test_the_other_modes_compile_silently(stages, mode):
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataOptionWarning)
        compiled = stages.compile(double, mode=mode, dynamic=False)
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x), x * 2)
