"""Max pooling through the whole compiler (decision 0420): one generated kernel of strided
loads, values and indices equal to eager's on both code generators (Triton under its
interpreter), channels-last kept, no index arithmetic when only values are read, training
gradients equal to eager's, and no max-pool call left to ATen in ResNet-18."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchstrata.runtime as rt

RESNET = Path(__file__).resolve().parent.parent / "bench" / "workloads" / "nets" / "resnet.py"
CODEGENS = ("cpp", pytest.param("triton", marks=pytest.mark.triton))


def _input(shape, dtype=torch.float32, channels_last=False, seed=0):
    """Small integers (ties) with NaN and -inf in some windows."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=generator).to(dtype)
    pick = torch.rand(shape, generator=generator)
    x[pick < 0.05] = float("nan")
    x[(pick > 0.05) & (pick < 0.12)] = float("-inf")
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def _codegen(codegen, monkeypatch):
    if codegen == "triton":
        pytest.importorskip("triton")
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def _pool_with_indices(kernel, stride, padding, dilation, ceil_mode):
    def pool(x):
        return F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode, return_indices=True)

    return pool


@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "dilation", "ceil_mode"),
    [
        (3, 2, 1, 1, False),
        (3, 2, 1, 1, True),
        (2, None, 0, 1, True),
        ((3, 2), (1, 2), (1, 0), 2, True),
    ],
)
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_values_and_indices_equal_eager(
    codegen, kernel, stride, padding, dilation, ceil_mode, dtype, monkeypatch, tmp_path
) -> None:
    _codegen(codegen, monkeypatch)
    pool = _pool_with_indices(kernel, stride, padding, dilation, ceil_mode)
    options = {"cache_dir": str(tmp_path)}
    for seed, channels_last in enumerate((False, True)):
        x = _input((2, 3, 9, 11), dtype, channels_last, seed)
        compiled = rt.compile(pool, codegen=codegen, options=options)
        report = rt.explain(compiled, x)
        assert not report.fallback and not report.eager_ops, str(report)
        assert len(report.kernels) == 1, str(report)
        values, indices = compiled(x)
        want_values, want_indices = pool(x)
        torch.testing.assert_close(values, want_values, equal_nan=True, rtol=0, atol=0)
        assert torch.equal(indices, want_indices)
        assert values.stride() == want_values.stride()
        assert indices.stride() == want_indices.stride()


@pytest.mark.parametrize("codegen", CODEGENS)
def test_values_only_kernel_stores_no_indices(codegen, monkeypatch, tmp_path) -> None:
    """Inference reads only the values: the kernel computes no index (no iota, no index
    arithmetic), and the result equals eager's."""
    _codegen(codegen, monkeypatch)

    def pool(x):
        return F.max_pool2d(x, 3, 2, 1)

    x = _input((1, 4, 9, 9), channels_last=True)
    compiled = rt.compile(pool, codegen=codegen, options={"cache_dir": str(tmp_path)})
    (kernel,) = rt.explain(compiled, x).kernels
    window_ops = {"cat", "full", "slice", "maximum"}
    assert set(kernel.ops) <= {f"prims.{op}" for op in window_ops}, kernel.ops
    result = compiled(x)
    torch.testing.assert_close(result, pool(x), equal_nan=True, rtol=0, atol=0)
    assert result.stride() == pool(x).stride()


@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize("channels_last", (False, True))
def test_training_through_max_pooling_matches_eager(
    codegen, channels_last, monkeypatch, tmp_path
) -> None:
    """Forward and backward (``max_pool2d_with_indices_backward`` decomposed too, with
    overlapping windows: an input gathers several outputs' gradients) run in generated
    kernels, and the gradients equal eager's."""
    _codegen(codegen, monkeypatch)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1, ceil_mode=True),
        nn.Flatten(),
        nn.Linear(4 * 5 * 6, 5),
    )
    ours = copy.deepcopy(model)
    compiled = rt.compile(ours, codegen=codegen, options={"cache_dir": str(tmp_path)})
    x = torch.randn(2, 3, 9, 11)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    for fn in (model, compiled):
        for _ in range(2):
            fn(x).square().sum().backward()
    for (name, want), (_, got) in zip(model.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(got.grad, want.grad, msg=name)

    def pooled_grad(x):
        return F.max_pool2d(x, 3, 2, 1).square().sum()

    x.requires_grad_(True)
    report = rt.explain(rt.compile(pooled_grad, codegen=codegen), x)
    assert not report.fallback and not report.eager_ops, str(report)
    grad_ours = torch.autograd.grad(rt.compile(pooled_grad, codegen=codegen)(x), x)[0]
    torch.testing.assert_close(grad_ours, torch.autograd.grad(pooled_grad(x), x)[0])


def test_resnet18_keeps_no_max_pool_extern() -> None:
    spec = importlib.util.spec_from_file_location("bench_resnet", RESNET)
    assert spec is not None and spec.loader is not None
    resnet = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(resnet)
    torch.manual_seed(0)
    model = resnet.ResNet18(width=8, classes=10).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        report = rt.explain(model, x)
        assert not report.fallback, report.fallback
        assert not [op for op in report.eager_ops if "max_pool" in op], report.eager_ops
        torch.testing.assert_close(rt.compile(model)(x), model(x))
