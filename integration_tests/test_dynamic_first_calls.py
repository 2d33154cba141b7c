"""A symbolic lowering's first call at a size it serves falls back where it raises
(issue 33, decision 0430): a kernel (or its launcher) made to raise at one size, the
call at that size returns eager's result, a ``TorchstrataFallbackWarning`` names the
failure, ``size_lowering_stats()`` counts it, the size is lowered on its own, and later
sizes still run the symbolic lowering. A size whose first call ran takes no wrapper
again."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchstrata.runtime as tsr
from torchstrata.runtime import first_calls, symbolic_lowering

#: the size whose first call raises (not a size a lowering is made at: see each test)
BAD = 7


@pytest.fixture(autouse=True)
def _fresh_counts() -> Iterator[None]:
    tsr.reset_size_lowering_stats()
    yield


class InjectedFailure(RuntimeError):
    """What the patched kernel raises."""


def _failing(fn: Callable[..., Any], calls: list[int]) -> Callable[..., Any]:
    """``fn`` raising :class:`InjectedFailure` when its first input has ``BAD`` rows
    (``calls`` records those calls)."""

    def run(*inputs: Any) -> Any:
        if inputs[0].shape[0] == BAD:
            calls.append(BAD)
            raise InjectedFailure(f"kernel launch failed at {BAD} rows")
        return fn(*inputs)

    return run


def _first_call_fallbacks(stats: dict[str, int]) -> dict[str, int]:
    return {key: n for key, n in stats.items() if key.startswith("fallback: first call")}


def _run(compiled, fn, sizes, make) -> list[warnings.WarningMessage]:
    """Call ``compiled`` at each size, each result equal to eager's; the warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for size in sizes:
            inputs = make(size)
            torch.testing.assert_close(compiled(*inputs), fn(*inputs))
    return [w for w in caught if issubclass(w.category, tsr.TorchstrataFallbackWarning)]


def scaled_softmax(x):
    return torch.softmax(x * 2.0, -1) + 1.0


def test_a_cpp_kernel_that_fails_at_one_size_falls_back_for_that_size(monkeypatch):
    calls: list[int] = []
    made = symbolic_lowering.inference_runner
    monkeypatch.setattr(
        symbolic_lowering,
        "inference_runner",
        lambda fn, aot, *views: made(_failing(fn, calls), aot, *views),
    )
    compiled = tsr.compile(scaled_softmax, dynamic=True, codegen="cpp")
    sizes = (5, BAD, 6, BAD, 9, 5, 11)
    fell_back = _run(compiled, scaled_softmax, sizes, lambda n: (torch.randn(n, 12),))
    assert calls == [BAD], calls  # tried once; the second call at BAD runs per size
    assert len(fell_back) == 1, [str(w.message) for w in fell_back]
    assert "InjectedFailure: kernel launch failed at 7 rows" in str(fell_back[0].message)
    stats = tsr.size_lowering_stats()
    assert _first_call_fallbacks(stats) == {
        "fallback: first call: InjectedFailure: kernel launch failed at 7 rows": 1
    }, stats
    # BAD on its own; every other size (6, 9, 11 after it) by a symbolic lowering
    assert stats.get("per_size") == 1, stats
    assert stats.get("symbolic", 0) + stats.get("reused", 0) == len(set(sizes)), stats


def test_a_lowering_failing_at_every_new_size_stops_serving(monkeypatch):
    made = symbolic_lowering.inference_runner

    def failing_after_first(fn, aot, *views):
        lowered: list[int] = []  # the size of this lowering's first call

        def run(*inputs):
            if lowered and inputs[0].shape[0] != lowered[0]:
                raise InjectedFailure("launch failed")
            lowered.append(inputs[0].shape[0])
            return fn(*inputs)

        return made(run, aot, *views)

    monkeypatch.setattr(symbolic_lowering, "inference_runner", failing_after_first)
    compiled = tsr.compile(scaled_softmax, dynamic=True, codegen="cpp")
    # rows under 8 share one lowering (4 columns; 8 rows and more: another)
    sizes = (5, 6, 7, 4, 3, 9)
    fell_back = _run(compiled, scaled_softmax, sizes, lambda n: (torch.randn(n, 4),))
    assert len(fell_back) == 1, [str(w.message) for w in fell_back]  # once per lowering
    stats = tsr.size_lowering_stats()
    assert sum(_first_call_fallbacks(stats).values()) == 2, stats
    # after two failed first calls (6, 7) the lowering serves no new size: 4 and 3 per
    # size; 9, which it never served, gets a lowering of its own
    assert stats.get("reused") == 2 and stats.get("per_size") == 4, stats
    assert stats.get("symbolic") == 2, stats


def test_a_size_that_ran_takes_no_first_call_wrapper_again(monkeypatch):
    entered: list[tuple[int, ...]] = []
    call = first_calls.FirstCall.__call__

    def counted(self, *inputs):
        entered.append(self.key)
        return call(self, *inputs)

    monkeypatch.setattr(first_calls.FirstCall, "__call__", counted)
    compiled = tsr.compile(scaled_softmax, dynamic=True, codegen="cpp")
    sizes = (5, 6, 9, 5, 6, 9, 5, 6, 9, 6)
    assert _run(compiled, scaled_softmax, sizes, lambda n: (torch.randn(n, 8),)) == []
    assert sorted(entered) == [(5, 8), (6, 8), (9, 8)], entered  # each size's first call only
    stats = tsr.size_lowering_stats()
    assert stats.get("symbolic", 0) + stats.get("reused", 0) == 3 and len(stats) <= 2, stats


def _rows_softmax(x):
    return torch.softmax(x, -1) * 2.0


@pytest.mark.triton
def test_a_triton_launch_that_fails_at_one_size_falls_back(monkeypatch):
    """``codegen="triton"`` on CPU tensors (Triton's interpreter): the sized kernel's
    launch for a new size (where an H100 raised ``ValueError`` from a bucket's cache
    key) made to raise at ``BAD`` rows."""
    from torchstrata.inductor.codegen.triton.sized_launch import SizedKernel

    at = SizedKernel.at
    calls: list[int] = []

    def failing_at(self, values):
        if BAD in tuple(values):
            calls.append(BAD)
            raise ValueError(f"cache key for {BAD} rows must be 16 to 128 lowercase hex digits")
        return at(self, values)

    monkeypatch.setattr(SizedKernel, "at", failing_at)
    compiled = tsr.compile(_rows_softmax, dynamic=True, codegen="triton")
    sizes = (5, BAD, 6, 8, BAD, 6)  # one bucket of rows (5 to 8): one lowering
    fell_back = _run(compiled, _rows_softmax, sizes, lambda n: (torch.randn(n, 16),))
    assert calls, "the sized launcher was not used"
    assert len(fell_back) == 1, [str(w.message) for w in fell_back]
    assert "ValueError: cache key for 7 rows" in str(fell_back[0].message)
    stats = tsr.size_lowering_stats()
    assert sum(_first_call_fallbacks(stats).values()) == 1, stats
    assert stats.get("per_size") == 1, stats
    assert stats.get("symbolic", 0) + stats.get("reused", 0) == len(set(sizes)), stats


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 24), nn.GELU(), nn.Linear(24, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_a_training_forward_that_fails_at_one_size_falls_back(monkeypatch):
    calls: list[int] = []
    made = symbolic_lowering.symbolic_training_runner

    def failing_forward(aot, forward, backward, slots, *views):
        return made(aot, (forward[0], _failing(forward[1], calls)), backward, slots, *views)

    monkeypatch.setattr(symbolic_lowering, "symbolic_training_runner", failing_forward)
    torch.manual_seed(0)
    model = MLP()
    twin = MLP()
    twin.load_state_dict(model.state_dict())

    def loss(module, x, y):
        return F.mse_loss(module(x), y)

    compiled = tsr.compile(lambda x, y: loss(model, x, y), dynamic=True, codegen="cpp")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch in (3, BAD, 9, BAD, 11):
            x, y = torch.randn(batch, 6), torch.randn(batch, 5)
            got, want = compiled(x, y), loss(twin, x, y)
            torch.testing.assert_close(got, want)
            got.backward()
            want.backward()
            for mine, theirs in zip(model.parameters(), twin.parameters()):
                torch.testing.assert_close(mine.grad, theirs.grad)
    fell_back = [w for w in caught if issubclass(w.category, tsr.TorchstrataFallbackWarning)]
    assert calls == [BAD]
    assert len(fell_back) == 1 and "InjectedFailure" in str(fell_back[0].message)
    stats = tsr.size_lowering_stats()
    assert sum(_first_call_fallbacks(stats).values()) == 1, stats
    assert stats.get("per_size") == 1, stats  # BAD; 9 and 11 by a symbolic lowering
    assert stats.get("symbolic", 0) + stats.get("reused", 0) == 4, stats


def _reversed_rows(x, rows):
    return x.index_select(0, rows) * 2


def test_a_first_call_that_eager_fails_too_raises_and_records_nothing():
    # an index out of range at a new size: the symbolic kernel's bound check raises, so
    # does the per-size lowering (as eager): the call's own error, not the lowering's
    compiled = tsr.compile(_reversed_rows, dynamic=True, codegen="cpp")
    for n in (5, 6):
        x, rows = torch.randn(n, 4), torch.arange(n - 1, -1, -1)
        torch.testing.assert_close(compiled(x, rows), _reversed_rows(x, rows))
    x, rows = torch.randn(9, 4), torch.arange(8, -1, -1)
    bad = rows.clone()
    bad[3] = 9
    with warnings.catch_warnings():
        warnings.simplefilter("error", tsr.TorchstrataFallbackWarning)
        with pytest.raises(IndexError, match="out of bounds"):
            compiled(x, bad)
        torch.testing.assert_close(compiled(x, rows), _reversed_rows(x, rows))
    assert not _first_call_fallbacks(tsr.size_lowering_stats())


def update_in_place(p, g):
    p.add_(g * 2)
    return p.sum(0)


def test_a_first_call_that_fails_after_writing_its_input_puts_it_back(monkeypatch):
    # the failed call wrote ``p`` (its write-back ran): the retry per size starts from
    # the value the call was given, so ``p`` is updated once (decision 0445)
    calls: list[int] = []
    made = symbolic_lowering.inference_runner

    def failing_after_writing(fn, aot, *views):
        runner = made(fn, aot, *views)

        def run(*inputs):
            outputs = runner(*inputs)
            if inputs[0].shape[0] == BAD:
                calls.append(BAD)
                raise InjectedFailure("failed after the write-back")
            return outputs

        return run

    monkeypatch.setattr(symbolic_lowering, "inference_runner", failing_after_writing)
    compiled = tsr.compile(update_in_place, dynamic=True, codegen="cpp")
    for rows in (5, BAD, 6, 9):
        p, g = torch.randn(rows, 3), torch.randn(rows, 3)
        twin = p.clone()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tsr.TorchstrataFallbackWarning)
            got = compiled(p, g)
        torch.testing.assert_close(got, update_in_place(twin, g))
        torch.testing.assert_close(p, twin)
    assert calls == [BAD], calls
    assert len(_first_call_fallbacks(tsr.size_lowering_stats())) == 1


def test_a_large_written_input_is_not_copied_and_a_failure_after_writing_it_raises(
    monkeypatch,
):
    # inputs past COPIED_WRITES_BYTES (a KV cache) are not copied at each new size: a
    # failure before the write falls back per size, one after it raises with a note
    monkeypatch.setattr(first_calls, "COPIED_WRITES_BYTES", 0)
    made = symbolic_lowering.inference_runner

    def failing(fn, aot, *views):
        runner = made(fn, aot, *views)

        def run(*inputs):
            if inputs[0].shape[0] == BAD:
                raise InjectedFailure("failed before the write-back")
            outputs = runner(*inputs)
            if inputs[0].shape[0] == BAD + 2:
                raise InjectedFailure("failed after the write-back")
            return outputs

        return run

    monkeypatch.setattr(symbolic_lowering, "inference_runner", failing)
    compiled = tsr.compile(update_in_place, dynamic=True, codegen="cpp")
    for rows in (5, BAD, 6):
        p, g = torch.randn(rows, 3), torch.randn(rows, 3)
        twin = p.clone()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tsr.TorchstrataFallbackWarning)
            got = compiled(p, g)
        torch.testing.assert_close(got, update_in_place(twin, g))
        torch.testing.assert_close(p, twin)
    p, g = torch.randn(BAD + 2, 3), torch.randn(BAD + 2, 3)
    with pytest.raises(InjectedFailure) as raised:
        compiled(p, g)
    assert first_calls.WRITTEN_NOTE in raised.value.__notes__
