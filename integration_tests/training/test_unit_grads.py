"""A cross-entropy loss's gradient computed in the forward (unit gradients) through the
whole pipeline: generated C++, the reference interpreter and Triton's interpreter."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as rt
from torchstrata.core import AutogradOptions, CompileOptions
from torchstrata.runtime import explain


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), target)


def cross_entropy_explicit(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Log-sum-exp minus the picked logit, the max not detached (its gradient counts ties)."""
    x = logits.float()
    peak = x.amax(-1, keepdim=True)
    lse = (x - peak).exp().sum(-1).log() + peak.squeeze(-1)
    picked = x.gather(-1, target[:, None]).squeeze(-1)
    return (lse - picked).mean()


def _inputs(rows: int = 16, vocab: int = 1000) -> tuple[torch.Tensor, torch.Tensor]:
    logits = torch.randn(rows, vocab).to(torch.bfloat16)
    target = torch.randint(0, vocab, (rows,))
    target[3] = -100  # an ignored row: no gradient, and not counted in the mean
    return logits, target


def _reference_grad(logits, target, seed: float) -> torch.Tensor:
    """The float64 gradient for the tangent ``seed``."""
    leaf = logits.double().requires_grad_()
    F.cross_entropy(leaf, target).backward(torch.tensor(seed, dtype=torch.float64))
    return leaf.grad


@pytest.fixture(params=["cpp", "eager", "triton"])
def backend(request, monkeypatch) -> str:
    if request.param == "triton":
        pytest.importorskip("triton")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    return request.param


@pytest.mark.parametrize("seed", [1.0, 0.5, 0.0])
def test_cross_entropy_gradients_match_float64(backend, seed):
    logits, target = _inputs()
    compiled = rt.compile(cross_entropy, codegen=backend)
    leaf = logits.clone().requires_grad_()
    loss = compiled(leaf, target)
    loss.backward(torch.tensor(seed))
    want = _reference_grad(logits, target, seed)
    assert leaf.grad.dtype == torch.bfloat16
    # one bf16 rounding of the float64 gradient (two for a seed other than 1)
    torch.testing.assert_close(leaf.grad.double(), want, rtol=2**-7, atol=1e-7)
    assert not leaf.grad[3].any()


@pytest.mark.parametrize("seed", [1.0, 0.5])
def test_explicit_cross_entropy_shares_the_max_gradient_among_ties(backend, seed):
    """The max's gradient (zero but for rounding) is shared among its ties; the forward
    computes it from the sum it already has (factored_sums.py)."""
    logits, target = _inputs()
    target[3] = 0
    logits[0, [3, 700]] = 9.0  # two maxima
    compiled = rt.compile(cross_entropy_explicit, codegen=backend)
    leaf = logits.clone().requires_grad_()
    compiled(leaf, target).backward(torch.tensor(seed))
    reference = logits.double().requires_grad_()
    cross_entropy_explicit(reference, target).backward(torch.tensor(seed, dtype=torch.float64))
    torch.testing.assert_close(leaf.grad.double(), reference.grad, rtol=2**-7, atol=1e-7)


def test_a_retained_graph_backward_twice_accumulates_both(backend):
    logits, target = _inputs()
    compiled = rt.compile(cross_entropy, codegen=backend)
    leaf = logits.clone().requires_grad_()
    loss = compiled(leaf, target)
    loss.backward(torch.tensor(1.0), retain_graph=True)
    loss.backward(torch.tensor(0.25))
    want = _reference_grad(logits, target, 1.25)
    torch.testing.assert_close(leaf.grad.double(), want, rtol=2**-6, atol=1e-7)


def test_the_forward_walks_the_logits_once_for_loss_and_gradient():
    """The valid-target count comes first, so the kernel that walks the logits for the
    row statistics also writes the gradient (no second kernel over the logits)."""
    logits, target = _inputs()
    report = explain(rt.compile(cross_entropy, codegen="cpp"), logits.requires_grad_(), target)
    writers = [k for k in report.kernels if "buf_to_copy_1_unit" in k.source]
    assert len(writers) == 1, [k.name for k in report.kernels]
    assert "prims.amax" in writers[0].ops and "buf_amax" in writers[0].source


def test_switched_off_the_forward_computes_no_gradient():
    logits, target = _inputs()
    off = CompileOptions(codegen="cpp", autograd=AutogradOptions(unit_grads=False))
    report = explain(rt.compile(cross_entropy, options=off), logits.requires_grad_(), target)
    assert not any("_unit" in k.source for k in report.kernels)


def _scale_kernel(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from torchstrata.runtime.unit_scale import _kernel

    return _kernel()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_scaling_kernel_multiplies_as_torch_does(monkeypatch, dtype):
    from torchstrata.runtime.unit_scale import launch_scale

    kernel = _scale_kernel(monkeypatch)
    grad = torch.randn(10_001, dtype=dtype)  # programs stride over more than one block
    want = grad * torch.tensor(0.3, dtype=dtype)
    launch_scale(kernel, grad, torch.tensor(0.3, dtype=dtype))
    torch.testing.assert_close(grad, want, rtol=0, atol=0)


def test_the_scaling_kernel_leaves_a_gradient_scaled_by_one_untouched(monkeypatch):
    from torchstrata.runtime.unit_scale import launch_scale

    kernel = _scale_kernel(monkeypatch)
    grad = torch.randn(5000).to(torch.bfloat16)
    grad[7] = float("nan")
    before = grad.clone()
    launch_scale(kernel, grad, torch.tensor(1.0))
    assert torch.equal(grad.view(torch.int16), before.view(torch.int16))
    launch_scale(kernel, grad, torch.tensor(float("nan")))
    assert grad.isnan().all()


def test_gpu_gradients_get_the_compiled_kernel_where_triton_interprets(monkeypatch):
    """Under ``TRITON_INTERPRET=1`` (set by the user, or, before ``triton_env``, left set
    by the inductor once it ran Triton on a CPU tensor) the GPU scaling kernel was
    decorated as an interpreted one: it rounded bf16 otherwise than torch and, on the
    GPU's grid, scaled only the first blocks."""
    triton = pytest.importorskip("triton")
    from torchstrata.runtime import unit_scale

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    unit_scale._build.cache_clear()
    try:
        compiled = unit_scale._build(interpreted=False)
        interpreted = unit_scale._build(interpreted=True)
    finally:
        unit_scale._build.cache_clear()
    assert isinstance(compiled, triton.runtime.JITFunction)
    assert not isinstance(interpreted, triton.runtime.JITFunction)
    assert os.environ["TRITON_INTERPRET"] == "1"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_the_gpu_scaling_is_right_after_triton_ran_on_the_cpu(monkeypatch):
    """The scaling of GPU gradients under ``TRITON_INTERPRET=1``, on a gradient of more
    blocks than the kernel's programs."""
    pytest.importorskip("triton")
    from torchstrata.runtime import unit_scale

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    unit_scale._build.cache_clear()
    unit_scale._scaler.cache_clear()
    try:
        grad = torch.randn(64, 40_000, device="cuda").to(torch.bfloat16)
        for value in (0.3, 0.7, 2.0):  # dispatched through Triton, then launched directly
            scale = torch.tensor(value, device="cuda")
            want = (grad.float() * scale).to(torch.bfloat16)
            unit_scale.scale_in_place(grad, scale)
            assert torch.equal(grad, want), value
    finally:
        unit_scale._build.cache_clear()
        unit_scale._scaler.cache_clear()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_the_gpu_scaling_bf16_rounds_once():
    """In float32, then to bf16 (``grad.mul_(scale)`` would round the scale to bf16 first)."""
    from torchstrata.runtime.unit_scale import scale_in_place

    grad = torch.randn(1 << 20, device="cuda").to(torch.bfloat16)
    # the first launch goes through Triton's dispatch, the later ones directly
    for value in (0.3, 1.0, 0.7, 1.0):
        scale = torch.tensor(value, device="cuda")
        want = (grad.float() * scale).to(torch.bfloat16)
        before = grad.clone()
        scale_in_place(grad, scale)
        assert torch.equal(grad, want)
        if value == 1.0:
            assert torch.equal(grad.view(torch.int16), before.view(torch.int16))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_the_gpu_gradients_of_one_size_in_several_dtypes_scale_right():
    """The direct launch keeps the binary its first call compiled, for that call's
    pointer types. Launches were cached by size alone: a float32 gradient's launch then
    read a bfloat16 gradient of the same size (and its bfloat16 scale) as float32 and
    wrote garbage (the H200 OpInfo gradient sweep: 260 wrong scalar gradients)."""
    from torchstrata.runtime.unit_scale import scale_in_place

    for dtype, scale_dtype in [
        (torch.float32, torch.float32),
        (torch.bfloat16, torch.bfloat16),
        (torch.float32, torch.bfloat16),
        (torch.float16, torch.float32),
        (torch.float64, torch.float64),
    ]:
        for _ in range(3):  # the first launch dispatches through Triton, the rest directly
            grad = torch.randn(5, device="cuda").to(dtype)
            scale = torch.tensor(0.3, device="cuda").to(scale_dtype)
            wide = torch.float64 if dtype == torch.float64 else torch.float32
            want = (grad.to(wide) * scale.to(wide)).to(dtype)
            scale_in_place(grad, scale)
            assert torch.equal(grad, want), (dtype, scale_dtype)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("explicit", [False, True])
def test_on_the_gpu_steps_seeded_in_turn_stay_right(explicit):
    """Seeds 1, 0.5, 1, 1, 2, 1 on the GPU: the tangent noted in pinned memory a step late,
    the forward switching between its two graphs, the scaling launched directly."""
    fn = cross_entropy_explicit if explicit else cross_entropy
    logits, target = _inputs(rows=64, vocab=40_000)
    target[3] = 0 if explicit else -100
    compiled = rt.compile(fn, codegen="triton")
    leaf = logits.cuda().requires_grad_()
    for seed in (1.0, 0.5, 1.0, 1.0, 2.0, 1.0):
        leaf.grad = None
        compiled(leaf, target.cuda()).backward(torch.tensor(seed, device="cuda"))
        reference = logits.double().requires_grad_()
        fn(reference, target).backward(torch.tensor(seed, dtype=torch.float64))
        torch.testing.assert_close(leaf.grad.double().cpu(), reference.grad, rtol=2**-7, atol=1e-7)


def test_on_the_cpu_scaling_bf16_rounds_once():
    from torchstrata.runtime.unit_scale import scale_in_place

    grad = torch.randn(1000).to(torch.bfloat16)
    want = (grad.float() * 0.3).to(torch.bfloat16)
    scale_in_place(grad, torch.tensor(0.3))
    assert torch.equal(grad, want)


def test_without_a_gradient_to_fuse_the_count_stays_with_the_loss():
    """Rule 5 reorders only when a fusion was refused: inference keeps two kernels, the
    row statistics and one for the count and the mean together."""
    logits, target = _inputs()
    report = explain(rt.compile(cross_entropy, codegen="cpp"), logits, target)
    assert len(report.kernels) == 2, [k.ops for k in report.kernels]
    count = [k for k in report.kernels if "prims.ne" in k.ops]
    assert len(count) == 1 and "prims.gather" in count[0].ops


def test_steps_seeded_otherwise_then_with_one_stay_right(backend):
    """After a tangent other than 1 the forward runs without unit gradients (compiled on
    first need), then with them again once a backward is seeded with 1."""
    logits, target = _inputs()
    compiled = rt.compile(cross_entropy, codegen=backend)
    leaf = logits.clone().requires_grad_()
    for seed in (0.5, 1.0, 1.0, 2.0):
        leaf.grad = None
        compiled(leaf, target).backward(torch.tensor(seed))
        want = _reference_grad(logits, target, seed)
        torch.testing.assert_close(leaf.grad.double(), want, rtol=2**-7, atol=1e-7)
