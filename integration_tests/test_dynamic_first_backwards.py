"""A training graph lowered once for many sizes whose compiled backward raises at a size's
first backward falls back to its ATen graph (issue 33, decision 0485): eager's gradients,
one ``TorchstrataFallbackWarning`` naming the error and the sizes, counted in
``size_lowering_stats()``; later backwards at that size run the ATen graph, other sizes the
compiled backward. The inputs are kept alive on a size's first backward only; a backward
that wrote an input before failing raises (run again, it would count that update twice)."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchstrata.runtime as tsr
from torchstrata.runtime import symbolic_backward, symbolic_lowering
from torchstrata.runtime.runners import call_boxed

#: the batch size whose backward raises (not the size the lowering is made at)
BAD = 7


@pytest.fixture(autouse=True)
def _fresh_counts() -> Iterator[None]:
    tsr.reset_size_lowering_stats()
    yield


class InjectedFailure(RuntimeError):
    """What the patched backward raises."""


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 24), nn.GELU(), nn.Linear(24, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _at_bad(inputs: Any) -> bool:
    return any(isinstance(t, torch.Tensor) and t.shape[:1] == (BAD,) for t in inputs)


class Backward:
    """The compiled backward ``fn``, called boxed as the runtime calls it (decision 0411),
    raising :class:`InjectedFailure` at ``BAD`` rows where ``fails`` (after ``before``,
    given the inputs); ``freed``: per call, how many of its tensor inputs nothing but the
    launcher held (dead once it returned)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        fails: bool = True,
        before: Callable[[list[Any]], None] | None = None,
    ) -> None:
        self.fn = fn
        self.fails = fails
        self.before = before
        self.calls: list[int] = []
        self.freed: list[int] = []

    def __call__(self, *inputs: Any) -> Any:
        return self.boxed(list(inputs))

    def boxed(self, inputs: list[Any]) -> Any:
        if self.fails and _at_bad(inputs):
            self.calls.append(BAD)
            if self.before is not None:
                self.before(inputs)
            raise InjectedFailure("backward kernel failed")
        refs = [weakref.ref(t) for t in inputs if isinstance(t, torch.Tensor)]
        computed = call_boxed(self.fn, inputs)
        self.freed.append(sum(ref() is None for ref in refs))
        return computed


def _patched(monkeypatch, **kwargs: Any) -> list[Backward]:
    """Every symbolic training runner made with its backward a :class:`Backward`."""
    made = symbolic_lowering.symbolic_training_runner
    backwards: list[Backward] = []

    def runner(aot, forward, backward, slots, *rest):
        backwards.append(Backward(backward[1], **kwargs))
        return made(aot, forward, (backward[0], backwards[-1]), slots, *rest)

    monkeypatch.setattr(symbolic_lowering, "symbolic_training_runner", runner)
    return backwards


def _steps(batches, device: str = "cpu", codegen: str = "cpp") -> list[warnings.WarningMessage]:
    """Training steps of a compiled MLP loss at each batch size, loss and gradients equal
    to eager's; the fallback warnings."""
    torch.manual_seed(0)
    model, twin = MLP().to(device), MLP().to(device)
    twin.load_state_dict(model.state_dict())

    def loss(module, x, y):
        return F.mse_loss(module(x), y)

    compiled = tsr.compile(lambda x, y: loss(model, x, y), dynamic=True, codegen=codegen)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch in batches:
            x, y = torch.randn(batch, 6, device=device), torch.randn(batch, 5, device=device)
            got, want = compiled(x, y), loss(twin, x, y)
            torch.testing.assert_close(got, want)
            got.backward()
            want.backward()
            for mine, theirs in zip(model.parameters(), twin.parameters(), strict=True):
                torch.testing.assert_close(mine.grad, theirs.grad)
    return [w for w in caught if issubclass(w.category, tsr.TorchstrataFallbackWarning)]


def _first_backward_fallbacks() -> dict[str, int]:
    stats = tsr.size_lowering_stats()
    return {k: n for k, n in stats.items() if k.startswith("fallback: first backward")}


@pytest.mark.parametrize(
    ("device", "codegen"),
    [
        ("cpu", "cpp"),
        pytest.param("cpu", "triton", marks=pytest.mark.triton),  # Triton's interpreter
        pytest.param(
            "cuda",
            "triton",
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
            ],
        ),
    ],
)
def test_a_backward_that_fails_at_one_size_gives_eager_gradients_with_a_warning(
    monkeypatch, device, codegen
):
    backwards = _patched(monkeypatch)
    fell_back = _steps((3, BAD, 9, BAD, 11, 3), device, codegen)
    calls = [call for backward in backwards for call in backward.calls]
    assert calls == [BAD], calls  # the second step at BAD: the ATen graph
    assert len(fell_back) == 1, [str(w.message) for w in fell_back]
    message = str(fell_back[0].message)
    assert "InjectedFailure: backward kernel failed" in message and f": {BAD}}}" in message
    assert _first_backward_fallbacks() == {
        "fallback: first backward: InjectedFailure: backward kernel failed": 1
    }
    # 3, 9, 11, 3 by the compiled backward (C++: one lowering; Triton: one per bucket)
    assert sum(len(backward.freed) for backward in backwards) == 4
    stats = tsr.size_lowering_stats()
    assert stats.get("symbolic", 0) + stats.get("reused", 0) == 4, stats  # no size per size


def test_only_a_sizes_first_backward_keeps_its_inputs(monkeypatch):
    backwards = _patched(monkeypatch, fails=False)
    made = symbolic_backward.SizedBackward
    sized: list[symbolic_backward.SizedBackward] = []

    def kept(*args: Any) -> symbolic_backward.SizedBackward:
        sized.append(made(*args))
        return sized[-1]

    monkeypatch.setattr("torchstrata.runtime.symbolic_training.SizedBackward", kept)
    assert _steps((4, 5, 4, 5, 4)) == []
    (backward,) = backwards
    # a size's first backward: every input held for a fallback, none freed by the
    # launcher; later ones: the saved activations die at their last use (decision 0411)
    first, steady = backward.freed[:2], backward.freed[2:]
    assert first == [0, 0], backward.freed
    assert len(steady) == 3 and min(steady) > 0, backward.freed
    # a size whose backward ran takes the compiled backward itself: no wrapper
    (owner,) = sized
    assert len(owner.settled) == 2, owner.settled
    assert all(owner.at(key) is backward for key in owner.settled)


def test_a_backward_that_wrote_an_input_before_failing_raises(monkeypatch):
    # a backward that added into its incoming gradient (or a saved value) in place and
    # then failed: run again on the same inputs, that update would count twice
    def accumulate(inputs: list[Any]) -> None:
        written = next(t for t in inputs if isinstance(t, torch.Tensor) and t.shape[:1] == (BAD,))
        written.add_(1.0)

    _patched(monkeypatch, before=accumulate)
    model = MLP()
    compiled = tsr.compile(lambda x, y: F.mse_loss(model(x), y), dynamic=True, codegen="cpp")
    compiled(torch.randn(3, 6), torch.randn(3, 5)).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    loss = compiled(torch.randn(BAD, 6), torch.randn(BAD, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("error", tsr.TorchstrataFallbackWarning)
        with pytest.raises(InjectedFailure, match="backward kernel failed") as raised:
            loss.backward()
    notes = raised.value.__notes__
    assert f"torchstrata: {symbolic_backward.WROTE_INPUT}" in notes, notes
    assert notes[-1] == symbolic_backward.BACKWARD_NOTE
    for before, parameter in zip(grads, model.parameters(), strict=True):
        torch.testing.assert_close(parameter.grad, before)  # nothing accumulated
    assert not _first_backward_fallbacks()


@pytest.mark.graph_cache
def test_a_lowering_read_from_the_graph_cache_falls_back_too(monkeypatch, tmp_path):
    """A stored lowering (decision 0450) holds no ATen backward: its first failing
    backward takes the one of the entry's symbolic trace, made then, whose partition at
    the stored lowering's sizes is the stored one."""
    from torchstrata.core import CompileOptions
    from torchstrata.runtime import symbolic_cache

    options = CompileOptions(cache_dir=str(tmp_path))
    torch.manual_seed(0)
    model, twin = MLP(), MLP()
    twin.load_state_dict(model.state_dict())

    def loss(module, x, y):
        return F.mse_loss(module(x), y)

    def steps(batches) -> list[warnings.WarningMessage]:
        compiled = tsr.compile(lambda x, y: loss(model, x, y), dynamic=True, options=options)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for batch in batches:
                x, y = torch.randn(batch, 6), torch.randn(batch, 5)
                got, want = compiled(x, y), loss(twin, x, y)
                torch.testing.assert_close(got, want)
                got.backward()
                want.backward()
                for mine, theirs in zip(model.parameters(), twin.parameters(), strict=True):
                    torch.testing.assert_close(mine.grad, theirs.grad)
        return [w for w in caught if issubclass(w.category, tsr.TorchstrataFallbackWarning)]

    assert steps((3, 4)) == []  # stored
    made = symbolic_cache.sized_training_runner
    backwards: list[Backward] = []

    def runner(aot, forward, backward, *rest):
        backwards.append(Backward(backward))
        return made(aot, forward, backwards[-1], *rest)

    monkeypatch.setattr(symbolic_cache, "sized_training_runner", runner)
    tsr.reset_size_lowering_stats()
    fell_back = steps((5, BAD, BAD, 9))
    stats = tsr.size_lowering_stats()
    assert stats.get("cached") == 1 and "symbolic" not in stats, stats  # read, not lowered
    (backward,) = backwards
    assert backward.calls == [BAD] and len(backward.freed) == 2
    assert len(fell_back) == 1 and "InjectedFailure" in str(fell_back[0].message)
    assert sum(_first_backward_fallbacks().values()) == 1


def test_a_dynamo_graphs_backward_that_fails_at_one_size_falls_back(monkeypatch):
    """``torch.compile(backend="torchstrata")``: Dynamo's graph lowered once for many sizes
    (decision 0455) takes the same fallback."""
    backwards = _patched(monkeypatch)
    torch.manual_seed(0)
    model, twin = MLP(), MLP()
    twin.load_state_dict(model.state_dict())
    torch.compiler.reset()
    compiled = torch.compile(
        lambda x, y: F.mse_loss(model(x), y), backend="torchstrata", dynamic=True
    )
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for batch in (3, 5, BAD, BAD, 9):
                x, y = torch.randn(batch, 6), torch.randn(batch, 5)
                got, want = compiled(x, y), F.mse_loss(twin(x), y)
                got.backward()
                want.backward()
                torch.testing.assert_close(got, want)
                for mine, theirs in zip(model.parameters(), twin.parameters(), strict=True):
                    torch.testing.assert_close(mine.grad, theirs.grad)
    finally:
        torch.compiler.reset()
    fell_back = [w for w in caught if issubclass(w.category, tsr.TorchstrataFallbackWarning)]
    assert len(fell_back) == 1 and "InjectedFailure" in str(fell_back[0].message)
    assert [call for backward in backwards for call in backward.calls] == [BAD]
    assert sum(_first_backward_fallbacks().values()) == 1
