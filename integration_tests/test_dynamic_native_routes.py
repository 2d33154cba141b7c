"""A symbolic entry's last layout compared natively (decision 0475): the entry with the
native checks refuses every call the Python one refuses (a relation, a static dim, a
stride pattern, a size 0 or 1, dtype, device, ``requires_grad``) in its routed and its
unrouted checks, both pass the same calls, and a passing call goes to the runner lowered
for its sizes."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
import torch

import torchstrata.runtime as rt
from torchstrata.core import CompileOptions
from torchstrata.runtime.native_guards import tensor_checks
from torchstrata.runtime.size_routes import SizeRoutes

NATIVE = tensor_checks(True) is not None
needs_native = pytest.mark.skipif(not NATIVE, reason="no C++ compiler: Python guards only")


def scale_add(x, w):
    return x * w + 1


def branch_on_rows(x, w):
    if x.shape[0] > 3:
        return x * w + 1
    return x * w - 1


def _compiled(fn: Any, native: bool, dynamic: bool | None = True) -> Any:
    options = CompileOptions(native_guards=native)
    compiled = rt.compile(fn, dynamic=dynamic, codegen="cpp", options=options)
    w = torch.randn(8)
    for rows in (4, 5):  # a second size: dim 0 symbolic (dynamic=None: dim 1 stays 8)
        x = torch.randn(rows, 8)
        torch.testing.assert_close(compiled(x, w), fn(x, w))
    (entry,) = [e for e in compiled.cache.entries if e.guards.routed]  # dynamic=None: 2
    assert (entry.guards.native_count > 0) == native
    return compiled


def _routed(compiled: Any, *args: Any) -> Any:
    (entry,) = [e for e in compiled.cache.entries if e.guards.routed]
    return entry.guards.fetch_args(args, compiled._globals)


def _runners(compiled: Any) -> dict[tuple[int, ...], Any]:
    """The size dispatch's runners by the sizes they were lowered for."""
    (entry,) = [e for e in compiled.cache.entries if e.guards.routed]
    return entry.run.args[0][0].__globals__["get"].__self__


def _changes(x: torch.Tensor, w: torch.Tensor) -> dict[str, tuple[Any, ...]]:
    return {
        "relation": (x, torch.randn(7)),  # x.size(1) == w.size(0) broken
        "static dim": (torch.randn(6, 9), torch.randn(9)),  # dynamic=None: dim 1 is 8
        "stride": (torch.randn(8, 6).t(), w),  # same sizes, column-major
        "size one": (torch.randn(1, 8), w),
        "size zero": (torch.randn(0, 8), w),
        "dtype": (x.double(), w),
        "device": (torch.empty(6, 8, device="meta"), w),
        "requires_grad": (x.clone().requires_grad_(), w),
        "not a tensor": (x, [1.0] * 8),
    }


@pytest.mark.parametrize("native", [pytest.param(True, marks=needs_native), False])
@pytest.mark.parametrize(
    "change",
    [
        "relation",
        "static dim",
        "stride",
        "size one",
        "size zero",
        "dtype",
        "device",
        "requires_grad",
        "not a tensor",
    ],
)
def test_a_symbolic_entry_refuses_each_change_after_a_passing_layout(native, change):
    compiled = _compiled(scale_add, native, dynamic=None)
    x, w = torch.randn(6, 8), torch.randn(8)
    (entry,) = [e for e in compiled.cache.entries if e.guards.routed]
    guards, globals_ = entry.guards, compiled._globals
    changed = _changes(x, w)[change]
    for _ in range(2):  # the layout that passed last: compared first
        assert _routed(compiled, x, w) is not None
        # the unrouted checks (a keyword call's, a positional one's)
        assert guards.check({"x": x, "w": w}, globals_) == -1
        assert guards.check_args((x, w), globals_) == -1
    assert _routed(compiled, *changed) is None
    assert guards.check(dict(zip("xw", changed, strict=True)), globals_) >= 0
    assert guards.check_args(changed, globals_) >= 0
    assert _routed(compiled, x, w) is not None  # the route kept for the passing layout
    assert guards.check({"x": x, "w": w}, globals_) == -1


@pytest.mark.parametrize("native", [pytest.param(True, marks=needs_native), False])
def test_a_routed_entry_refuses_a_size_its_relation_excludes_after_routing(native):
    compiled = _compiled(branch_on_rows, native)
    w = torch.randn(8)
    assert _routed(compiled, torch.randn(4, 8), w) is not None
    assert _routed(compiled, torch.randn(4, 8), w) is not None  # the last layout
    small = torch.randn(3, 8)  # same width and row stride: only the relation differs
    assert _routed(compiled, small, w) is None
    torch.testing.assert_close(compiled(small, w), branch_on_rows(small, w))  # its own entry


@needs_native
def test_the_last_layout_is_compared_natively_and_routes_to_its_runner():
    compiled = _compiled(scale_add, True)
    (entry,) = compiled.cache.entries
    routes: SizeRoutes = entry.run_inputs.__self__
    (last,) = [
        value
        for value in entry.guards.fetch_args.__globals__.values()
        if type(value).__name__ == "LastLayout"
    ]
    w = torch.randn(8)
    for rows in (6, 4, 6, 9, 9):
        x = torch.randn(rows, 8)
        torch.testing.assert_close(compiled(x, w), scale_add(x, w))
    x = torch.randn(9, 8)
    route = last(x, w)  # remembered from the table, with its layout
    assert route is routes.table[(x.shape, x.stride(), w.shape, w.stride())]
    (runner,) = route
    assert runner is _runners(compiled)[(9, 8)]  # the runner of the call's sizes
    assert last(torch.randn(6, 8), w) is None  # another layout: the table's
    # the unrouted checks remember the layout that passed last natively too
    assert re.search(r"\.remember\(True, _v\d+, _v\d+\)", entry.guards.source)
    assert re.search(r"\.remember\(True, _v\d+, _v\d+\)", entry.guards.args_source or "")


def _random_input(rng: random.Random) -> tuple[torch.Tensor, torch.Tensor]:
    rows, cols = rng.choice((0, 1, 2, 3, 5, 8)), rng.choice((1, 2, 8, 8, 8))
    x = torch.randn(rows, cols)
    if rng.random() < 0.2:
        x = torch.randn(cols, rows).t()
    elif rng.random() < 0.2:
        x = torch.randn(rows, cols * 2)[:, ::2]
    width = cols if rng.random() < 0.8 else rng.choice((1, 3, 8))
    w = torch.randn(width)
    if rng.random() < 0.1:
        w = w.double()
    return x, w


def _unrouted(compiled: Any, x: torch.Tensor, w: torch.Tensor) -> tuple[bool, bool]:
    """Whether the entry's keyword and positional checks pass."""
    (entry,) = [e for e in compiled.cache.entries if e.guards.routed]
    guards, globals_ = entry.guards, compiled._globals
    return guards.check({"x": x, "w": w}, globals_) < 0, guards.check_args((x, w), globals_) < 0


@needs_native
def test_native_and_python_routes_agree_on_random_layouts():
    native, python = _compiled(scale_add, True), _compiled(scale_add, False)
    rng = random.Random(0)
    passed = 0
    for _ in range(150):
        x, w = _random_input(rng)
        ours, theirs = _routed(native, x, w), _routed(python, x, w)
        assert (ours is None) == (theirs is None), (x.shape, x.stride(), w.shape, w.dtype)
        assert _unrouted(native, x, w) == _unrouted(python, x, w) == (ours is not None,) * 2
        if ours is not None:
            passed += 1
            torch.testing.assert_close(native(x, w), scale_add(x, w))
            torch.testing.assert_close(python(x, w), scale_add(x, w))
            (runner,) = _routed(native, x, w)[0]  # the layout routed by the call
            assert _runners(native)[tuple(x.shape)] is runner  # the runner of its sizes
    assert 20 < passed < 150  # both kinds of answers were compared
