"""A function whose ``__code__`` is reassigned after the compile (a hot reload, a test
double) must not keep running the graph traced from its old code: neither the compiled
function itself nor a function or module ``forward`` inlined into it.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

import torchstrata.runtime as rt


def _plus_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def _times_three(x: torch.Tensor) -> torch.Tensor:
    return x * 3


def _helper(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def _calls_helper(x: torch.Tensor) -> torch.Tensor:
    return _helper(x) * 2


@contextmanager
def _code_of(function: types.FunctionType, donor: types.FunctionType) -> Iterator[None]:
    """``function`` runs ``donor``'s code inside the block."""
    original = function.__code__
    function.__code__ = donor.__code__
    try:
        yield
    finally:
        function.__code__ = original


def test_compiled_function_code_replaced():
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def renamed(a: torch.Tensor) -> torch.Tensor:  # another parameter name, too
        return a * 3 - 1

    compiled = rt.compile(fn)
    x = torch.arange(4.0)
    torch.testing.assert_close(compiled(x), x + 1)
    fn.__code__ = renamed.__code__
    torch.testing.assert_close(compiled(x), x * 3 - 1)
    torch.testing.assert_close(compiled(a=x), x * 3 - 1)
    assert compiled.recompile_reasons and "__code__" in compiled.recompile_reasons[-1]


def test_inlined_global_function_code_replaced():
    compiled = rt.compile(_calls_helper)
    x = torch.arange(4.0)
    torch.testing.assert_close(compiled(x), (x + 1) * 2)
    with _code_of(_helper, _times_three):
        torch.testing.assert_close(compiled(x), x * 3 * 2)
    torch.testing.assert_close(compiled(x), (x + 1) * 2)
    assert "code of _helper" in compiled.recompile_reasons[0]


class _Child(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale(x) + 1

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class _Parent(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = _Child()
        self.second = _Child()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))


@pytest.mark.parametrize("method", ["forward", "scale"])
def test_submodule_method_code_replaced(method: str):
    # A submodule's forward and a method it calls are both inlined into the parent's graph.
    model = _Parent()
    compiled = rt.compile(model)
    x = torch.arange(4.0)
    torch.testing.assert_close(compiled(x), model(x))
    with _code_of(getattr(_Child, method), getattr(_ChildDonor, method)):
        torch.testing.assert_close(compiled(x), model(x))
    torch.testing.assert_close(compiled(x), model(x))
    assert f"code of _Child.{method}" in compiled.compiled_forward.recompile_reasons[0]


def test_top_level_forward_code_replaced():
    model = _Child()
    compiled = rt.compile(model)
    x = torch.arange(4.0)
    torch.testing.assert_close(compiled(x), model(x))
    with _code_of(_Child.forward, _ChildDonor.forward):
        torch.testing.assert_close(compiled(x), model(x))
    torch.testing.assert_close(compiled(x), model(x))
    assert "__code__ was replaced" in compiled.compiled_forward.recompile_reasons[0]


class _ChildDonor(torch.nn.Module):
    """Code with the same names as :class:`_Child`'s, computing something else."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale(x) - 5

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        return x * 7
