"""Constant tensors made inside compiled code (``torch.tensor([...])``) through the whole
compiler: the graph compiles (no fallback warning), the constant is passed to it as a
hidden input, and each call behaves as eager's, also when the graph writes or returns
the constant."""

from __future__ import annotations

import warnings

import pytest
import torch

import torchstrata.runtime as rt

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
LARGE = torch.arange(10_000, dtype=torch.float32).tolist()


def _quietly(fn, *args):
    """``fn(*args)``, failing on any warning (a fallback to eager among them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args)


def _compiled(fn, *args, **options):
    """``rt.compile(fn)``, checked to run generated kernels (not eagerly) on ``args``."""
    report = rt.explain(fn, *args)
    assert not report.fallback, report.fallback
    assert report.kernels, str(report)
    return rt.compile(fn, **options)


def scaled(x):
    return x * torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])


def picked_sum(x):
    index = torch.tensor([0, 2, 4])
    return x[index].sum()


def masked(x):
    mask = torch.tensor([True, False, True, False, True])
    return torch.where(mask, x, 0.0) + x.masked_fill(mask, -1.0)


def shifted_by_large(x):
    return x + torch.tensor(LARGE)


def zero_dim(x):
    return x * torch.tensor(2.5) + 1


@pytest.mark.parametrize("fn", [scaled, picked_sum, masked, zero_dim])
def test_read_only_constants_compile_and_match_eager(fn):
    x = torch.randn(5)
    compiled = _compiled(fn, x)
    for _ in range(2):
        torch.testing.assert_close(_quietly(compiled, x), fn(x))


@pytest.mark.parametrize("fn", [scaled, picked_sum])
def test_triton_kernels_read_constants(fn, monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # Triton kernels on CPU tensors
    x = torch.randn(5)
    torch.testing.assert_close(_quietly(rt.compile(fn, codegen="triton"), x), fn(x))


def test_a_large_constant_compiles_and_matches_eager():
    x = torch.randn(10_000)
    compiled = _compiled(shifted_by_large, x)
    for _ in range(2):
        torch.testing.assert_close(_quietly(compiled, x), shifted_by_large(x))


MUTABLE = list(range(1_000))


def shifted_by_mutable(x):
    return x + torch.tensor(MUTABLE, dtype=torch.float32)


def test_a_global_list_is_guarded_as_one_and_a_changed_item_recompiles():
    x = torch.randn(1_000)
    report = rt.explain(shifted_by_mutable, x)
    assert len(report.guards) > 1_000  # its type, its length and each item
    assert rt.GuardSet(report.guards).source.count("if not") < 10
    compiled = rt.compile(shifted_by_mutable)
    torch.testing.assert_close(_quietly(compiled, x), shifted_by_mutable(x))
    MUTABLE[500] = -7
    try:
        torch.testing.assert_close(compiled(x), shifted_by_mutable(x))
        MUTABLE[500] = 500.0  # equal, but a float: another dtype-inferring constant
        torch.testing.assert_close(compiled(x), shifted_by_mutable(x))
    finally:
        MUTABLE[500] = 500


def test_a_constant_written_in_place_starts_from_its_values_every_call():
    def accumulate(x):
        c = torch.tensor([1.0, 2.0])
        c.add_(x.sum())
        return c

    x = torch.ones(3)
    compiled = _compiled(accumulate, x)
    for _ in range(3):
        torch.testing.assert_close(_quietly(compiled, x), torch.tensor([4.0, 5.0]))


def test_a_returned_constant_and_its_view_are_fresh_every_call():
    def table(x):
        c = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
        return c, c[1], x + 1

    x = torch.zeros(2)
    compiled = _compiled(table, x)
    whole, row, _ = _quietly(compiled, x)
    torch.testing.assert_close(whole, torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert row.data_ptr() == whole[1].data_ptr()  # a view of the whole, as in eager
    whole.mul_(10)  # the caller owns its result: this must not reach the next call
    again, again_row, _ = _quietly(compiled, x)
    assert again is not whole
    assert again.untyped_storage().data_ptr() != whole.untyped_storage().data_ptr()
    torch.testing.assert_close(again, torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    torch.testing.assert_close(again_row, torch.tensor([3.0, 4.0]))


def test_training_through_a_constant_matches_eager_gradients():
    x = torch.randn(5, requires_grad=True)
    compiled = _compiled(scaled, x)
    for _ in range(2):
        ours = x.detach().clone().requires_grad_()
        out = _quietly(compiled, ours)
        torch.testing.assert_close(out, scaled(x))
        tangent = torch.randn(5)
        out.backward(tangent)
        (expected,) = torch.autograd.grad(scaled(x), x, tangent)
        torch.testing.assert_close(ours.grad, expected)


def test_training_with_a_scalar_loss_and_an_index_constant():
    def loss(w):
        return (w[torch.tensor([3, 1, 3])] * torch.tensor([0.5, 2.0, 1.0])).sum()

    w = torch.randn(4, requires_grad=True)
    compiled = _compiled(loss, w)
    ours = w.detach().clone().requires_grad_()
    _quietly(compiled, ours).backward()
    loss(w).backward()
    torch.testing.assert_close(ours.grad, w.grad)


def _same_device_constant(x):
    return (x * torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], device=x.device)).sin()


def _cpu_index_constant(x):
    return (x[torch.tensor([3, 1, 3])] * 2.0).sum()


@needs_cuda
@pytest.mark.parametrize("fn", [_same_device_constant, _cpu_index_constant])
@pytest.mark.parametrize("training", [False, True])
def test_constants_with_cuda_inputs(fn, training):
    """A constant made on the inputs' device, and a CPU constant that indexes a CUDA
    tensor (moved to the GPU once, at compile time)."""
    x = torch.randn(5, device="cuda", requires_grad=training)
    compiled = _compiled(fn, x)
    ours = x.detach().clone().requires_grad_(training)
    out = _quietly(compiled, ours)
    torch.testing.assert_close(out, fn(x))
    if training:
        out.sum().backward()
        fn(x).sum().backward()
        torch.testing.assert_close(ours.grad, x.grad)
