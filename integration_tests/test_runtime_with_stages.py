"""Runtime behaviour that needs the real stages installed (``nox -s isolated`` runs the
runtime's own tests with the runtime alone): codegen names, explain's stage timings."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as rt


def demo_fn(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.softmax(F.gelu(x + b), -1)


def test_an_unregistered_codegen_name_falls_back_naming_the_registered_ones():
    x, b = torch.randn(4, 8), torch.randn(8)
    compiled = rt.compile(demo_fn, codegen="cuda")
    with pytest.warns(rt.TorchstrataFallbackWarning, match="registered: .*cpp, eager, .*triton"):
        result = compiled(x, b)
    torch.testing.assert_close(result, demo_fn(x, b))


def test_a_backward_compiled_for_explain_is_timed_as_its_own_part():
    # the real stages (the fake autograd stage makes no backward)
    x = torch.randn(4, 8, requires_grad=True)
    report = rt.explain(demo_fn, x, torch.randn(8))
    names = [stage for stage, _ in report.stage_seconds]
    assert names[:4] == ["capture", "autograd", "decomp", "codegen"]
    assert names[4:] == ["backward graph: decomp", "backward graph: codegen"]
