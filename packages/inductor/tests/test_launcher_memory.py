"""The generated launcher frees each intermediate right after its last use."""

from __future__ import annotations

import weakref
from typing import Any

import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, aten, prim
from torchstrata.inductor import compile_graph


def _chain_graph():
    """kernel -> mm -> kernel -> mm -> kernel: every stage's result is dead two steps later."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((8, 16), torch.float32))
    w = b.input("w", TensorMeta((16, 16), torch.float32))
    h = b.call(prim("mul"), b.call(prim("add"), x, 1.0), 0.5)
    mm1 = b.call(aten("mm.default"), h, w)
    g = b.call(prim("exp"), b.call(prim("neg"), mm1))
    mm2 = b.call(aten("mm.default"), g, w)
    out = b.call(prim("mul"), mm2, 2.0)
    return b.build([out, g])


def test_launcher_source_deletes_intermediates_and_inputs_and_keeps_outputs():
    compiled = compile_graph(_chain_graph(), "cpu")
    source = compiled.launcher_source
    boxed = source[: source.index("\ndef launch(")]
    lines = boxed.splitlines()
    deleted = [
        name
        for line in lines
        if line.strip().startswith("del ")
        for name in line.strip().removeprefix("del ").split(", ")
    ]
    assert "buf_mul" in deleted and "buf_mm" in deleted and "buf_mm_1" in deleted
    # the boxed entry empties its argument list: an input goes at its last use (0411)
    assert lines[2].strip() == "args.clear()"
    assert {"buf_x", "buf_w"} <= set(deleted)
    assert not {"buf_exp", "buf_mul_1"} & set(deleted)
    # buf_mul (read by the first mm) is released before the second mm runs.
    first_mm = next(i for i, line in enumerate(lines) if "aten.mm.default" in line)
    assert lines[first_mm + 1].strip() == "del buf_mul"
    assert lines[-1].strip().startswith("return")


def test_intermediates_are_dead_while_later_steps_run():
    compiled = compile_graph(_chain_graph(), "cpu")
    namespace: dict[str, Any] = compiled.fn.__globals__
    allocated: list[weakref.ref[torch.Tensor]] = []
    alive_at_calls: list[int] = []
    real_empty = namespace["empty_strided"]

    def empty_strided(*args: Any, **kwargs: Any) -> torch.Tensor:
        tensor = real_empty(*args, **kwargs)
        allocated.append(weakref.ref(tensor))
        return tensor

    def counting(fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            alive_at_calls.append(sum(ref() is not None for ref in allocated))
            return fn(*args, **kwargs)

        return wrapper

    namespace["empty_strided"] = empty_strided
    for name in [n for n in namespace if n.startswith(("kernel", "extern"))]:
        namespace[name] = counting(namespace[name])
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    out, g = compiled(x, w)
    h = (x + 1.0) * 0.5
    torch.testing.assert_close(g, torch.exp(-(h @ w)))
    torch.testing.assert_close(out, (g @ w) * 2.0)
    # Three kernel buffers are allocated, but never more than two are alive at once:
    # buf_mul is gone before the last kernel launches (only buf_exp and its output remain).
    assert len(allocated) == 3
    assert max(alive_at_calls) <= 2
