"""Graphs that write their inputs, return views, or run under autocast, lowered once for
many sizes (issue 33, decisions 0445-0447).

Each program is called at many sizes (0 and 1 where eager allows them, odd sizes,
slices whose bounds are computed from sizes) and every call is compared with eager's:
the outputs, the inputs the program writes, gradients where it trains, and for each
output that eager returns as a view of an input (or of another output) its shape,
strides, storage offset, that it shares the compiled call's memory, and that a write
through it shows. ``size_lowering_stats()`` counts the lowerings: no size lowered on its
own but those a derived size of 0 or 1 specialises (decision 0408), and at most two per
inference program (an inference forward computes no output the runner rebuilds as a
view). The C++ codegen decides whether a length its kernels write is a multiple of 8 or
under 8 (its vector loops), a condition of the lowering: a training forward, which still
computes its view outputs, and a matmul's rows under autocast take up to 3 or 4.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchstrata.runtime as tsr
from torchstrata.runtime.first_calls import FirstCall

pytestmark = pytest.mark.usefixtures("size_counts_no_fallback")

#: the sizes most programs are called at: 0 and 1 (static entries), odd, even, larger
SIZES = (1, 16, 17, 0, 5, 33, 9, 40, 24, 7)


def _twin(value: Any) -> Any:
    """A copy of ``value`` laid out as it is (its storage copied: strides and storage
    offset kept)."""
    if not isinstance(value, torch.Tensor):
        return value
    storage = value.detach().untyped_storage().clone()
    twin = torch.empty(0, dtype=value.dtype).set_(
        storage, value.storage_offset(), value.shape, value.stride()
    )
    return twin.requires_grad_(value.requires_grad)


def _aliases(output: torch.Tensor, inputs: Sequence[Any], others: Sequence[Any]) -> Any:
    """What eager's ``output`` shares memory with: ("input", i), ("output", j) or None."""
    pointer = output.untyped_storage().data_ptr()
    for i, value in enumerate(inputs):
        if isinstance(value, torch.Tensor) and value.untyped_storage().data_ptr() == pointer:
            return "input", i
    for j, value in enumerate(others):
        if value is not output and value.untyped_storage().data_ptr() == pointer:
            return "output", j
    return None


def _check_call(got: Any, want: Any, args: Sequence[Any], twins: Sequence[Any], where: str) -> None:
    """Outputs and written inputs equal eager's; each output that eager's aliases (an
    input or another output) has eager's shape, strides and offset, shares the compiled
    call's memory, and a write through it shows where eager's shows."""
    got_all = got if isinstance(got, tuple) else (got,)
    want_all = want if isinstance(want, tuple) else (want,)
    _same_values(got_all, want_all, args, twins, where)
    for index, (a, b) in enumerate(zip(got_all, want_all, strict=True)):
        shares = _aliases(b, twins, want_all)
        if shares is None:
            continue
        layout = (b.shape, b.stride(), b.storage_offset())
        assert (a.shape, a.stride(), a.storage_offset()) == layout, f"{where} output {index}"
        kind, position = shares
        base = args[position] if kind == "input" else got_all[position]
        assert a.untyped_storage().data_ptr() == base.untyped_storage().data_ptr(), where
        if a.numel() and not a.requires_grad:
            with torch.no_grad():
                a[(0,) * a.dim()] = 123.0
                b[(0,) * b.dim()] = 123.0
            _same_values(got_all, want_all, args, twins, f"{where}, written through {index}")


def _same_values(
    got: Sequence[Any], want: Sequence[Any], args: Sequence[Any], twins: Sequence[Any], where: str
) -> None:
    assert len(got) == len(want), where
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        torch.testing.assert_close(a, b, msg=lambda m, i=index: f"{where} output {i}: {m}")
    for index, (a, b) in enumerate(zip(args, twins, strict=True)):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a, b, msg=lambda m, i=index: f"{where} input {i}: {m}")


def _run(
    fn: Callable[..., Any],
    make: Callable[[int], tuple[Any, ...]],
    sizes: Sequence[int] = SIZES,
    codegen: str = "cpp",
    **options: Any,
) -> dict[str, int]:
    """``fn`` compiled and called at each of ``sizes`` (its arguments ``make(size)``),
    every call checked against eager's on twins of the arguments; the lowering counts."""
    compiled = tsr.compile(fn, codegen=codegen, **options)
    torch.manual_seed(0)
    for size in sizes:
        args = make(size)
        twins = [_twin(a) for a in args]
        want = fn(*twins)
        got = compiled(*args)
        _check_call(got, want, args, twins, f"{fn.__name__} at size {size}")
    return tsr.size_lowering_stats()


def _lowered_once(stats: dict[str, int], most: int = 2, per_size: int = 0) -> None:
    assert 1 <= stats.get("symbolic", 0) <= most, stats
    assert stats.get("per_size", 0) == per_size, stats
    if not per_size:
        assert not any(key.startswith("fallback") for key in stats), stats


# ---------------------------------------------------------------- views of inputs


def halves(x):
    t = x.shape[1]
    return x[:, : t // 2], x[:, t - t // 3 :], x.transpose(0, 1)


def flat_rows(x):
    return x.view(-1, 4), x.reshape(x.shape[0], 2, 4)[:, 1], x.sum(0)


#: sizes whose slices in :func:`halves` are at least 2 long (0 and 1: static entries)
LONG_SLICES = (1, 16, 17, 0, 6, 33, 9, 40, 24, 7)


def test_views_of_inputs_with_bounds_from_sizes():
    _lowered_once(_run(halves, lambda n: (torch.randn(3, n),), LONG_SLICES))


def test_flattening_views_of_inputs():
    _lowered_once(_run(flat_rows, lambda n: (torch.randn(n, 8),)))


def test_small_sizes_whose_slices_are_empty_or_one_long():
    # at 2 to 5, t // 2 or t // 3 is 0 or 1: those sizes lower on their own (a derived
    # size of 0 or 1 is specialised, decision 0408), the others once
    stats = _run(halves, lambda n: (torch.randn(3, n),), sizes=(1, 16, 2, 3, 17, 9, 4, 33, 5))
    assert 1 <= stats.get("symbolic", 0) <= 2 and stats.get("per_size", 0) <= 4, stats


def test_views_of_non_contiguous_and_offset_inputs():
    # a transposed input ([3, n] of strides (1, 3)) and one at a storage offset: the
    # views' strides and offsets are those of the call's input, as eager's
    _lowered_once(_run(halves, lambda n: (torch.randn(n, 3).t(),), LONG_SLICES))
    tsr.reset_size_lowering_stats()
    # an input at a storage offset gets static entries (its offset is guarded): the views
    # are checked, no lowering counted
    _run(halves, lambda n: (torch.randn(n + 1, 3).t()[:, 1:],), LONG_SLICES)


# ---------------------------------------------------------------- views of outputs


def doubled_and_its_halves(x):
    y = x * 2
    n = y.shape[0]
    return y, y[: n // 2], y[n // 2 :].t()


def test_outputs_that_view_another_output():
    # y[: n // 2] is 1 long at 2 and 3 (not called here): 4 is the smallest symbolic size;
    # y[n // 2 :] starts at a symbolic offset (kept symbolic by the trace: 0445)
    stats = _run(
        doubled_and_its_halves,
        lambda n: (torch.randn(n, 3),),
        sizes=(1, 16, 0, 17, 4, 9, 40, 33, 24),
    )
    _lowered_once(stats)


# ---------------------------------------------------------------- write-backs


def sgd_step(p, g, buf):
    buf.mul_(0.9).add_(g)
    p.add_(buf, alpha=-0.1)
    return p.sum(0)


def returns_updated(x):
    x.mul_(2)
    return x, x[: x.shape[0] // 2]


def test_optimizer_like_in_place_updates():
    _lowered_once(
        _run(sgd_step, lambda n: (torch.randn(n, 3), torch.randn(n, 3), torch.randn(n, 3)))
    )


def test_an_updated_input_returned_and_viewed():
    stats = _run(
        returns_updated, lambda n: (torch.randn(n, 5),), sizes=(1, 16, 0, 17, 5, 33, 9, 40)
    )
    _lowered_once(stats)


def cache_slice_write(cache, k):
    t = k.shape[1]
    cache[:, t : 2 * t] = k
    return cache[:, : 2 * t], cache.sum(1)


def cache_index_copy(cache, k):
    t = k.shape[1]
    positions = torch.arange(t) * 2 + 1
    cache.index_copy_(1, positions, k)
    return (cache[:, : 2 * t] * 2).sum(-1)


def test_a_kv_cache_written_by_slice_assignment():
    stats = _run(cache_slice_write, lambda n: (torch.randn(2, 96, 4), torch.randn(2, n, 4)))
    _lowered_once(stats)


def test_a_kv_cache_written_by_index_copy():
    stats = _run(cache_index_copy, lambda n: (torch.randn(2, 96, 4), torch.randn(2, n, 4)))
    _lowered_once(stats)


def decode_step(cache, k, pos: int):
    t = k.shape[2]
    cache[:, :, pos : pos + t] = k
    return cache[:, :, : pos + t].sum(-1)


def test_a_decode_loop_writes_its_cache_at_symbolic_positions():
    # ``pos`` an int argument (symbolic from its second value), none, one or a few tokens
    # a step: an entry each for one token (its lowerings split at pos + 1 < 8, the C++ row
    # loops) and none (sizes 0 and 1 are specialised), one for several; no size lowered
    # on its own
    compiled = tsr.compile(decode_step, codegen="cpp")
    cache, twin = torch.zeros(2, 2, 64, 4), torch.zeros(2, 2, 64, 4)
    pos = 0
    for t in (5, 1, 1, 1, 3, 1, 1, 2, 1, 1, 1, 4, 1, 0, 1):
        k = torch.randn(2, 2, t, 4)
        got, want = compiled(cache, k, pos), decode_step(twin, k, pos)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(cache, twin)
        pos += t
    _lowered_once(tsr.size_lowering_stats(), most=4)


# ---------------------------------------------------------------- training


def _grads(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    grads = [t.grad.clone() for t in tensors]
    for t in tensors:
        t.grad = None
    return grads


def test_batch_norm_training_updates_its_running_statistics():
    torch.manual_seed(0)
    norm = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8))
    twin = copy.deepcopy(norm)
    compiled = tsr.compile(lambda x: norm(x).relu(), codegen="cpp")
    for rows in (16, 17, 5, 33, 2, 9, 24, 40):
        x = torch.randn(rows, 6, requires_grad=True)
        x_twin = x.detach().clone().requires_grad_()
        got, want = compiled(x), twin(x_twin).relu()
        torch.testing.assert_close(got, want)
        (got * got).sum().backward()
        (want * want).sum().backward()
        for a, b in zip(_grads([x, *norm.parameters()]), _grads([x_twin, *twin.parameters()])):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
        for a, b in zip(norm.buffers(), twin.buffers(), strict=True):
            torch.testing.assert_close(a, b)
    _lowered_once(tsr.size_lowering_stats())


def scaled_views(x, w):
    y = x @ w
    t = x.shape[0]
    return y, y[: t // 2], x.transpose(0, 1), y[t // 2 :].t()


def test_training_with_views_of_inputs_and_outputs():
    w = torch.randn(6, 6, requires_grad=True)
    w_twin = w.detach().clone().requires_grad_()
    compiled = tsr.compile(scaled_views, codegen="cpp")
    for rows in (16, 17, 6, 33, 9, 24, 40, 7):
        x = torch.randn(rows, 6, requires_grad=True)
        x_twin = x.detach().clone().requires_grad_()
        got, want = compiled(x, w), scaled_views(x_twin, w_twin)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b)
        assert [v.stride() for v in got] == [v.stride() for v in want]
        assert [v.storage_offset() for v in got] == [v.storage_offset() for v in want]
        assert got[1].untyped_storage().data_ptr() == got[0].untyped_storage().data_ptr()
        assert got[3].untyped_storage().data_ptr() == got[0].untyped_storage().data_ptr()
        assert got[2].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        sum(((i + 1) * v).sum() for i, v in enumerate(got)).backward()
        sum(((i + 1) * v).sum() for i, v in enumerate(want)).backward()
        for a, b in zip(_grads([x, w]), _grads([x_twin, w_twin]), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    _lowered_once(tsr.size_lowering_stats(), most=3)  # t and t // 2: alignment classes


# ---------------------------------------------------------------- autocast


def gelu_matmul(x, w):
    return F.gelu(x @ w) + x.sum(-1, keepdim=True)


BF16 = {"rtol": 1.6e-2, "atol": 1e-2}


def test_inference_under_cpu_autocast_lowers_once_per_state():
    w = torch.randn(16, 16)
    compiled = tsr.compile(gelu_matmul, codegen="cpp")
    sizes = (1, 16, 17, 0, 5, 33, 9, 40, 24, 7)
    for size in sizes:
        x = torch.randn(size, 16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, want = compiled(x, w), gelu_matmul(x, w)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, **BF16)
    under = tsr.size_lowering_stats()
    tsr.reset_size_lowering_stats()
    for size in sizes:  # the same function without autocast: another entry (guards)
        x = torch.randn(size, 16)
        torch.testing.assert_close(compiled(x, w), gelu_matmul(x, w))
    _lowered_once(under, most=3)
    _lowered_once(tsr.size_lowering_stats(), most=3)


def test_autocast_dtype_runs_of_a_symbolic_capture_take_the_calls_sizes(monkeypatch):
    # the fake runs that find autocast's casts get the call's sizes, not the capture's
    # symbolic ones (a mode of their own, no ShapeEnv: on CUDA such runs failed and the
    # frame compiled static per shape); the casts, and so the results, are the same
    from torchstrata.capture import autocast as capture_autocast

    shapes = []
    real = capture_autocast._fake

    def recorded(var, cast_to, region):
        value = real(var, cast_to, region)
        if isinstance(value, torch.Tensor):
            shapes.append((tuple(value.shape), tuple(value.stride())))
        return value

    monkeypatch.setattr(capture_autocast, "_fake", recorded)
    capture_autocast._CHOICES.clear()
    w = torch.randn(16, 16)
    compiled = tsr.compile(gelu_matmul, codegen="cpp", dynamic=True)
    for size in (5, 9):
        x = torch.randn(size, 16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.testing.assert_close(compiled(x, w), gelu_matmul(x, w), **BF16)
    assert tsr.size_lowering_stats().get("symbolic", 0) >= 1
    assert shapes and all(type(n) is int for shape in shapes for part in shape for n in part)


def test_training_under_cpu_autocast():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    twin = copy.deepcopy(model)
    compiled = tsr.compile(lambda x: model(x).float().pow(2).mean(), codegen="cpp")
    for rows in (16, 17, 5, 33, 9, 24, 40, 7):
        x = torch.randn(rows, 16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, want = compiled(x), twin(x).float().pow(2).mean()
        torch.testing.assert_close(got, want, **BF16)
        got.backward()
        want.backward()
        for a, b in zip(_grads(list(model.parameters())), _grads(list(twin.parameters()))):
            torch.testing.assert_close(a, b, **BF16)
    _lowered_once(tsr.size_lowering_stats(), most=4)


# ---------------------------------------------------------------- Triton


TRITON_SIZES = (1, 6, 7, 9, 0, 8, 12)


@pytest.mark.triton
def test_triton_views_and_write_backs_lower_once():
    # Triton's interpreter on CPU tensors; a lowering per power-of-two bucket (0400)
    for fn, make in (
        (sgd_step, lambda n: (torch.randn(n, 3), torch.randn(n, 3), torch.randn(n, 3))),
        (halves, lambda n: (torch.randn(3, n),)),
        (cache_index_copy, lambda n: (torch.randn(2, 96, 4), torch.randn(2, n, 4))),
    ):
        tsr.reset_size_lowering_stats()
        stats = _run(fn, make, TRITON_SIZES, codegen="triton")
        assert stats.get("per_size", 0) == 0 and stats.get("symbolic", 0) >= 1, (fn, stats)


@pytest.mark.triton
def test_triton_inference_under_autocast_lowers_once():
    w = torch.randn(16, 16)
    compiled = tsr.compile(gelu_matmul, codegen="triton")
    for size in TRITON_SIZES:
        x = torch.randn(size, 16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.testing.assert_close(compiled(x, w), gelu_matmul(x, w), **BF16)
    stats = tsr.size_lowering_stats()
    assert stats.get("per_size", 0) == 0 and stats.get("symbolic", 0) >= 1, stats


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_autocast_views_and_cache_writes_lower_once():
    # the GPU path of the tests above: bfloat16 autocast on CUDA, a view of the input,
    # a KV cache written by index_copy_, inference (Triton training: another decision)
    w = torch.randn(64, 64, device="cuda")

    def block(x, cache):
        t = x.shape[1]
        h = F.gelu(x @ w)
        cache.index_copy_(1, torch.arange(t, device=x.device), h.float())
        return h, x[:, : t // 2], cache[:, :t].sum(-1)

    compiled = tsr.compile(block)
    with torch.no_grad():
        for t in (1, 16, 17, 0, 33, 9, 40, 64, 100, 7):
            x = torch.randn(2, t, 64, device="cuda")
            cache, twin = (
                torch.zeros(2, 128, 64, device="cuda"),
                torch.zeros(2, 128, 64, device="cuda"),
            )
            with torch.autocast("cuda", dtype=torch.bfloat16):
                got, want = compiled(x, cache), block(x, twin)
            for a, b in zip(got, want, strict=True):
                torch.testing.assert_close(a, b, **BF16)
            torch.testing.assert_close(cache, twin, **BF16)
            assert got[1].data_ptr() == x[:, : t // 2].data_ptr() and got[1].stride() == x.stride()
    stats = tsr.size_lowering_stats()
    assert stats.get("per_size", 0) <= 2 and stats.get("symbolic", 0) >= 1, stats


# ---------------------------------------------------------------- a first call that fails


def test_a_failed_first_call_puts_the_written_inputs_back():
    def writes_then_fails(x):
        x.add_(1.0)
        raise RuntimeError("a kernel failed at its first launch")

    def per_size_runner(x):
        return (x * 2,)

    failures: list[Exception] = []
    runners: dict[tuple[int, ...], Any] = {}
    first = FirstCall(
        writes_then_fails, (4,), runners, lambda: per_size_runner, failures.append, (0,)
    )
    runners[(4,)] = first
    x = torch.arange(4.0)
    (got,) = first(x)
    assert torch.equal(x, torch.arange(4.0)) and torch.equal(got, torch.arange(4.0) * 2)
    assert len(failures) == 1 and runners[(4,)] is per_size_runner
