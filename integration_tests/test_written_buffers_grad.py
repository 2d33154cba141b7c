"""A buffer written in place from a value that requires grad (a static KV cache in grad
mode): after each compiled call the buffer requires grad as after eager's call, holds
eager's values, and a loss that reads it sends eager's gradients to the parameters
(decision 0520). The second call, on a buffer that now requires grad, compiles rather
than falling back."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import torchstrata.runtime as rt
from torchstrata.core import CompileOptions
from torchstrata.runtime import TorchstrataFallbackWarning

from .triton_devices import TRITON_DEVICES

POSITIONS = ([0, 1], [2, 3], [1, 4])


class CachedKeys(nn.Module):
    """Keys of a linear projection written into a static cache at given positions."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("k_cache", torch.zeros(2, 6, 4))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        k = torch.tanh(self.proj(x))
        self.k_cache.index_copy_(1, pos, k)
        keys = torch.cat([self.k_cache, self.k_cache.flip(1)], 1)  # an op on a list
        return (keys * x.mean()).sum(1)


def _models() -> tuple[CachedKeys, CachedKeys]:
    torch.manual_seed(0)
    model = CachedKeys()
    return model, copy.deepcopy(model)


def _step(index: int, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(index + 1)
    return torch.randn(2, 2, 4, device=device), torch.tensor(POSITIONS[index], device=device)


def _compiled_entries(compiled: object) -> int:
    return len(compiled.compiled_forward.cache)  # type: ignore[attr-defined]


@pytest.mark.parametrize("eager_first", [False, True], ids=["compiled-first", "eager-first"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_the_buffer_requires_grad_and_gradients_flow_as_in_eager(dynamic, eager_first):
    model, eager = _models()
    if eager_first:  # as in a benchmark's rounds: the buffers require grad from the start
        for m in (model, eager):
            m(*_step(len(POSITIONS) - 1))
    compiled = rt.compile(model, dynamic=dynamic)
    entries = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        for index in range(len(POSITIONS)):
            x, pos = _step(index)
            out, expected = compiled(x, pos), eager(x, pos)
            torch.testing.assert_close(out, expected)
            torch.testing.assert_close(model.k_cache, eager.k_cache)
            assert model.k_cache.requires_grad is eager.k_cache.requires_grad is True
            assert model.k_cache.grad_fn is not None
            assert out.requires_grad
            entries.append(_compiled_entries(compiled))
    # a first call may see a buffer that does not require grad, the second one sees one
    # that does
    assert entries[0] == 1 and entries[1] <= entries[0] + 1
    assert entries[2] == entries[1]
    loss, eager_loss = (
        m.k_cache.square().sum() + out.sum() for m, out in ((model, out), (eager, expected))
    )
    loss.backward()
    eager_loss.backward()
    for param, eager_param in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(param.grad, eager_param.grad)


def test_the_gradient_reaches_the_old_value_of_a_buffer_that_requires_grad():
    model, eager = _models()
    start = torch.randn(2, 6, 4, requires_grad=True)
    compiled = rt.compile(model)
    for m in (model, eager):
        m.k_cache = start * 2  # a non-leaf that requires grad
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        x, pos = _step(0)
        compiled(x, pos).sum().backward()
    got = start.grad
    start.grad = None
    eager(x, pos).sum().backward()
    torch.testing.assert_close(got, start.grad)
    # the written positions are overwritten: no gradient reaches their old values
    assert not got[:, POSITIONS[0]].any() and got[:, 2:].all()


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode])
def test_a_write_without_grad_mode_leaves_the_buffer_without_grad(context):
    model, eager = _models()
    compiled = rt.compile(model)
    with context():
        for index in range(2):
            x, pos = _step(index)
            torch.testing.assert_close(compiled(x, pos), eager(x, pos))
    assert not model.k_cache.requires_grad and model.k_cache.grad_fn is None
    torch.testing.assert_close(model.k_cache, eager.k_cache)


def test_a_leaf_that_requires_grad_written_in_place_raises_as_in_eager():
    def write(w, x):
        w.add_(x)
        return w * 2

    w = torch.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        write(w, torch.ones(3))
    compiled = rt.compile(write)
    with (
        pytest.warns(TorchstrataFallbackWarning, match="leaf Variable that requires grad"),
        pytest.raises(RuntimeError, match="leaf Variable that requires grad"),
    ):
        compiled(w, torch.ones(3))
    assert not w.any()


@pytest.mark.graph_cache
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_the_graph_cache_serves_the_differentiable_write_back(tmp_path, dynamic):
    options = CompileOptions(cache_dir=str(tmp_path))
    deltas = []
    for _ in range(2):  # a cold compile, then one from the disk after reset()
        rt.reset()
        before = rt.graph_cache_stats()
        model, eager = _models()
        compiled = rt.compile(model, dynamic=dynamic, options=options)
        for index in range(2):
            x, pos = _step(index)
            out, expected = compiled(x, pos), eager(x, pos)
            assert model.k_cache.requires_grad and model.k_cache.grad_fn is not None
        (out.sum() + model.k_cache.square().sum()).backward()
        (expected.sum() + eager.k_cache.square().sum()).backward()
        for param, eager_param in zip(model.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(param.grad, eager_param.grad)
        deltas.append(rt.graph_cache_stats().hits - before.hits)
    assert deltas[0] == 0 and deltas[1] >= 1


def test_the_dynamo_backend_writes_back_as_eager_does():
    model, eager = _models()
    compiled = torch.compile(model, backend="torchstrata")
    for index in range(2):
        x, pos = _step(index)
        out, expected = compiled(x, pos), eager(x, pos)
        torch.testing.assert_close(out, expected)
        assert model.k_cache.requires_grad and model.k_cache.grad_fn is not None
    (out.sum() + model.k_cache.square().sum()).backward()
    (expected.sum() + eager.k_cache.square().sum()).backward()
    for param, eager_param in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(param.grad, eager_param.grad)


def test_the_compiled_forward_updates_the_buffer_in_place_and_marks_it_dirty():
    model, eager = _models()
    compiled = rt.compile(model)
    for index in range(2):
        x, pos = _step(index)
        compiled(x, pos)
        eager(x, pos)
    x, pos = _step(2)
    with torch.profiler.profile(record_shapes=True) as profile:
        out = compiled(x, pos)
    ops = [(event.name, event.input_shapes) for event in profile.events()]
    names = [name for name, _ in ops]
    assert "aten::index_copy_" in names and "aten::index_copy" not in names, ops
    # no copy of the whole cache, neither in the forward nor as the write-back
    cache_shape = list(model.k_cache.shape)
    assert not any(name == "aten::copy_" and shapes[0] == cache_shape for name, shapes in ops)
    # the buffer's history is the compiled function's (no CopyBackwards after it)
    assert "CompiledGraphFunction" in type(model.k_cache.grad_fn).__name__
    expected = eager(x, pos)
    torch.testing.assert_close(out, expected)
    (out.sum() + model.k_cache.square().sum()).backward()
    (expected.sum() + eager.k_cache.square().sum()).backward()
    for param, eager_param in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(param.grad, eager_param.grad)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_triton_kernels_write_the_buffer_back_as_eager_does(monkeypatch, device):
    if device == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")  # Triton kernels on CPU tensors
    model, eager = (m.to(device) for m in _models())
    compiled = rt.compile(model, codegen="triton")
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        for index in range(2):
            x, pos = _step(index, device)
            out, expected = compiled(x, pos), eager(x, pos)
            torch.testing.assert_close(out, expected)
            torch.testing.assert_close(model.k_cache, eager.k_cache)
            assert model.k_cache.requires_grad and model.k_cache.grad_fn is not None
    (out.sum() + model.k_cache.square().sum()).backward()
    (expected.sum() + eager.k_cache.square().sum()).backward()
    for param, eager_param in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(param.grad, eager_param.grad)
