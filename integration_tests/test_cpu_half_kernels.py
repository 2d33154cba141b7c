"""On the CPU, bf16 and fp16 kernels of the C++ backend equal eager's bit for bit where
their float math is the same: elementwise chains that eager rounds after each op, and row
sums, means and maxima over rows long enough for the lane-blocked sums (with partial
blocks and lanes) and over short ones. fp16 converts with F16C where the build targets
it (decision 0235), by integer arithmetic elsewhere; both must round as torch does."""

from __future__ import annotations

import warnings

import pytest
import torch

import torchstrata.runtime as rt

HALVES = [torch.bfloat16, torch.float16]


def _elementwise(x, y, w):
    # RoPE-like products and sums, each rounded by eager; a select; overflow to inf in fp16
    rotated = torch.cat((-x[..., 32:], x[..., :32]), dim=-1)
    return x * w + rotated * y, torch.where(x > y, x * 300.0, y - x), torch.maximum(x, y) * 0.5


def _reductions(a, b):
    return a.sum(-1), a.mean(-1), a.amax(-1), b.sum(-1), (a * 2).sum(-1)


def _compiled_without_fallback(fn, *args):
    """``fn`` compiled and run; a fallback to eager (a warning) fails the test."""
    rt.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return rt.compile(fn)(*args)


def _integers(shape, low, high, dtype, seed):
    # Small integers: every partial sum is exact in float, so the order of additions
    # cannot change a result, and eager's answer is the one answer.
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, shape, generator=generator).to(dtype)


@pytest.mark.parametrize("dtype", HALVES)
def test_elementwise_chains_equal_eager(dtype):
    generator = torch.Generator().manual_seed(0)
    x, y = (torch.randn(8, 64, generator=generator).to(dtype) * 4 for _ in range(2))
    w = torch.randn(64, generator=generator).to(dtype)
    x[0, :4] = torch.tensor([float("inf"), float("nan"), 6e-8, -0.0])
    got = _compiled_without_fallback(_elementwise, x, y, w)
    for ours, eager in zip(got, _elementwise(x, y, w), strict=True):
        assert ours.dtype == eager.dtype
        assert torch.equal(ours.isnan(), eager.isnan())
        assert torch.equal(ours.nan_to_num(), eager.nan_to_num()), int((ours != eager).sum())


@pytest.mark.parametrize("dtype", HALVES)
def test_row_reductions_equal_eager(dtype):
    # 4096 + 17: whole lane blocks, then a partial block with a partial set of lanes;
    # 100: a short row (one omp simd reduction, no lanes)
    a = _integers((3, 4096 + 17), -8, 9, dtype, seed=1)
    b = _integers((5, 100), -100, 101, dtype, seed=2)
    got = _compiled_without_fallback(_reductions, a, b)
    for ours, eager in zip(got, _reductions(a, b), strict=True):
        assert ours.dtype == eager.dtype
        assert torch.equal(ours, eager), (ours, eager)


@pytest.mark.parametrize("dtype", HALVES)
def test_row_sum_of_random_values_is_close_to_float64(dtype):
    x = torch.randn(4, 5000, generator=torch.Generator().manual_seed(3)).to(dtype)
    (ours,) = _compiled_without_fallback(lambda v: (v.sum(-1),), x)
    exact = x.double().sum(-1)
    # one rounding to the 16-bit result: within half an ulp of it, plus float's slack
    assert ((ours.double() - exact).abs() <= exact.abs() * torch.finfo(dtype).eps + 1e-4).all()


def _rmsnorm(x, w):
    h = x.float()
    return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def _layernorm(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


@pytest.mark.parametrize("n", [3 * 256 + 45, 255])
def test_fp16_normalisations_within_an_ulp_per_rounding_of_eager(n):
    """fp16 rmsnorm and layernorm over odd rows (whole blocks of 256 widened at once, then
    a partial block; a row shorter than one block) and odd row counts. Both compute in
    float; our row sums add in another order (lanes), so a float result may differ from
    eager's in its last bits, and each rounding to fp16 can then land one ulp apart:
    one rounding in layernorm, two in rmsnorm (the normalised row, then the product)."""
    generator = torch.Generator().manual_seed(n)
    x = (torch.randn(7, n, generator=generator) * 3).half()
    w, b = (torch.randn(n, generator=generator).half() for _ in range(2))
    for fn, args, roundings in ((_rmsnorm, (x, w), 2), (_layernorm, (x, w, b), 1)):
        ours, eager = _compiled_without_fallback(fn, *args), fn(*args)
        assert ours.dtype == eager.dtype == torch.float16
        ulp = eager.float().abs().clamp(min=2.0**-14) * torch.finfo(torch.float16).eps
        assert ((ours.float() - eager.float()).abs() <= roundings * ulp).all(), fn.__name__
