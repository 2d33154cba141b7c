"""Whole compiled calls with the launchers' native allocation (decision 0510) give what
the same compile with ``torch.empty_strided`` and eager give: an inference call's outputs,
a training step's loss and gradients, under inference mode, no_grad and deterministic
algorithms (which send every allocation to torch's path, to be filled); the tiny call
allocates natively."""

from __future__ import annotations

import copy

import torch

import torchstrata.runtime as rt
from torchstrata.core import CompileOptions, InductorOptions
from torchstrata.inductor.launch import native_alloc


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)
    )


def _step(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_training_steps_and_inference_calls_match_torchs_allocation():
    off = CompileOptions(inductor=InductorOptions(native_alloc=False))
    eager = _mlp()
    models = {"native": copy.deepcopy(eager), "torch": copy.deepcopy(eager)}
    compiled = {
        "native": rt.compile(models["native"]),
        "torch": rt.compile(models["torch"], options=off),
    }
    x = torch.randn(8, 16)
    want_loss, want_grads = _step(eager, x)
    for name, function in compiled.items():
        for _ in range(2):
            loss, grads = _step(function, x)
            torch.testing.assert_close(loss, want_loss, msg=name)
            torch.testing.assert_close(grads, want_grads, msg=name)
    with torch.no_grad():
        expected = eager(x)
        for function in compiled.values():
            torch.testing.assert_close(function(x), expected)
        module = native_alloc.native_module()
        before = module.torch_calls() if module is not None else 0
        torch.use_deterministic_algorithms(True)  # allocations filled: torch's path
        try:
            for function in compiled.values():
                torch.testing.assert_close(function(x), expected)
        finally:
            torch.use_deterministic_algorithms(False)
        assert module is None or module.torch_calls() > before
    with torch.inference_mode():
        for function in compiled.values():
            result = function(x)
            assert result.is_inference() and not result.requires_grad
            torch.testing.assert_close(result, eager(x))


def test_the_compiled_tiny_call_allocates_natively():
    module = native_alloc.native_module()
    if module is None:
        assert native_alloc.unavailable_reason()
        return
    function = rt.compile(lambda a: (a + 1) * 2)
    a = torch.randn(8)
    for _ in range(2):
        torch.testing.assert_close(function(a), (a + 1) * 2)
    before = module.torch_calls()
    for _ in range(3):
        result = function(a)
    assert module.torch_calls() == before  # none took torch's path
    assert type(result) is torch.Tensor and result.stride() == (1,) and not result.requires_grad


def test_a_lowering_for_many_sizes_allocates_natively():
    module = native_alloc.native_module()

    def reduce_rows(x: torch.Tensor) -> torch.Tensor:
        return (x.sin() + 1).sum(-1) * 2

    function = rt.compile(reduce_rows, dynamic=True)
    for rows in (5, 9, 13):  # sizes printed as symbols: the launcher computes them
        x = torch.randn(rows, 7)
        torch.testing.assert_close(function(x), reduce_rows(x))
    before = module.torch_calls() if module is not None else 0
    for rows in (6, 17):
        x = torch.randn(rows, 7)
        torch.testing.assert_close(function(x), reduce_rows(x))
    assert module is None or module.torch_calls() == before
