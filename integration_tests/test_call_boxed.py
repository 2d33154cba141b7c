"""``call_boxed``: a graph function called on a list that it empties (decision 0411)."""

from __future__ import annotations

import weakref
from typing import Any

import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, aten, prim
from torchstrata.inductor import compile_graph
from torchstrata.runtime.runners import LazyGraphFn, call_boxed


def _graph():
    """kernel(x) -> mm -> kernel: ``x`` is read by the first kernel only."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((8, 16), torch.float32))
    w = b.input("w", TensorMeta((16, 16), torch.float32))
    mm = b.call(aten("mm.default"), b.call(prim("add"), x, 1.0), w)
    return b.build([b.call(prim("exp"), mm)])


def test_a_plain_function_gets_the_items_and_the_list_is_emptied():
    args = [1, 2]
    assert call_boxed(lambda a, b: (a + b,), args) == (3,)
    assert args == []


def test_a_launcher_frees_an_input_after_its_last_use():
    compiled = compile_graph(_graph(), "cpu")
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    want = compiled.fn(x, w)
    x_ref = weakref.ref(x)
    namespace: dict[str, Any] = compiled.fn.__globals__
    real = namespace["empty_strided"]
    alive: list[bool] = []

    def empty_strided(*args: Any, **kwargs: Any) -> torch.Tensor:
        alive.append(x_ref() is not None)
        return real(*args, **kwargs)

    args = [x, w]
    del x
    namespace["empty_strided"] = empty_strided
    try:
        got = call_boxed(LazyGraphFn(lambda: compiled), args)
    finally:
        namespace["empty_strided"] = real
    assert args == []
    torch.testing.assert_close(got[0], want[0])
    # the first kernel's buffer is allocated while x lives; the last one's after x is gone
    assert alive[0] and not alive[-1]
