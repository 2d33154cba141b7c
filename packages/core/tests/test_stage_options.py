"""Typed stage options in CompileOptions, and ``from_env()`` for debugging."""

from __future__ import annotations

import pytest

from torchstrata.core import AutogradOptions, CompileOptions, InductorOptions
from torchstrata.core.stage_options import INDUCTOR_VARIABLES


def test_defaults_are_all_on():
    options = CompileOptions()
    assert options.inductor == InductorOptions() and options.autograd == AutogradOptions()
    assert options.inductor.tails and options.inductor.split_rows is None
    assert options.autograd.unit_grads


def test_from_env_reads_each_documented_variable():
    for field, variable in INDUCTOR_VARIABLES.items():
        off = InductorOptions.from_env({variable: "0"})
        assert getattr(off, field) is False, variable
        assert getattr(InductorOptions.from_env({variable: "1"}), field) is True, variable
    assert InductorOptions.from_env({}) == InductorOptions()
    assert not AutogradOptions.from_env({"TORCHSTRATA_UNIT_GRADS": "0"}).unit_grads


def test_from_env_reads_the_process_environment_only_when_asked(monkeypatch):
    monkeypatch.setenv("TORCHSTRATA_TAILS", "0")
    assert CompileOptions().inductor.tails  # nothing reads the environment implicitly
    assert not InductorOptions.from_env().tails


def test_bad_values_are_named():
    with pytest.raises(ValueError, match="TORCHSTRATA_TAILS='off'"):
        InductorOptions.from_env({"TORCHSTRATA_TAILS": "off"})
    with pytest.raises(TypeError, match="tails=1"):
        InductorOptions(tails=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        CompileOptions(inductor={"tails": False})  # type: ignore[arg-type]
