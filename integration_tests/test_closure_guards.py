"""Closure cells are guarded by the compiled entries that read them, through no
process-global registry: a changed cell fails its guard (the function recompiles),
and compiling many closures grows no module-level container of torchstrata."""

from __future__ import annotations

import gc
import sys
from collections import deque
from typing import Any

import torch

import torchstrata.runtime as rt


def make_scaled(scale: float):
    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x * scale

    return scaled


def make_nested(offset: float):
    def outer(x: torch.Tensor) -> torch.Tensor:
        def inner(y: torch.Tensor) -> torch.Tensor:
            return y + offset  # a cell of ``outer``, read through a closure made in the trace

        return inner(x) * 2

    return outer


def test_a_changed_closure_cell_fails_its_guard():
    fn = make_scaled(2.0)
    compiled = rt.compile(fn, options={"codegen": "eager"})
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), x * 2.0)
    fn.__closure__[0].cell_contents = 3.0
    torch.testing.assert_close(compiled(x), x * 3.0)
    report = rt.explain(fn, x)
    sources = [guard.source for guard in report.guards]
    assert any(source.startswith("__cell_scale_") for source in sources), sources


def test_a_changed_cell_read_by_an_inner_closure_fails_its_guard():
    fn = make_nested(1.0)
    compiled = rt.compile(fn, options={"codegen": "eager"})
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), (x + 1.0) * 2)
    fn.__closure__[0].cell_contents = -4.0
    torch.testing.assert_close(compiled(x), (x - 4.0) * 2)


def _container_sizes() -> dict[tuple[str, str], int]:
    """The size of every dict, list, set and deque held by a module of torchstrata (bounded
    caches, ``functools.lru_cache``, are functions: not counted)."""
    sizes = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("torchstrata.") or module is None:
            continue
        for attribute, value in list(vars(module).items()):
            if isinstance(value, dict | list | set | deque):
                sizes[name, attribute] = len(value)
    return sizes


def test_compiling_many_closures_grows_no_global():
    x = torch.randn(3)
    count = 12

    def compile_and_run() -> Any:
        # a new closure (a new cell) each time, of the same value: bounded caches keyed
        # by the traced values (meta results) hold one entry for all of them
        fn = make_scaled(2.0)
        compiled = rt.compile(fn, options={"codegen": "eager"})
        torch.testing.assert_close(compiled(x), x * 2.0)
        assert rt.explain(fn, x).guards  # the guards read the cell: it was guarded

    compile_and_run()  # warm up: imports, plugins, first-use caches
    gc.collect()
    before = _container_sizes()
    for _ in range(count):
        compile_and_run()
    gc.collect()
    after = _container_sizes()
    grown = {
        key: (before.get(key, 0), size)
        for key, size in after.items()
        if size - before.get(key, 0) >= count
    }
    assert not grown, f"module-level containers grew with each compiled closure: {grown}"
