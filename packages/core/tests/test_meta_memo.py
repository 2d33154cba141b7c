"""A builder keeps the metadata it inferred on symbolic sizes (decision 0281): a call
like an earlier one (same op, operand metadata and arguments) is not inferred again, a
call that differs in any of them is, and static sizes are always inferred."""

from __future__ import annotations

import torch

from torchstrata.core import (
    GraphBuilder,
    Level,
    SymbolicSizes,
    TensorMeta,
    builder,
    input_meta,
    prim,
    symbolic_scope,
)
from torchstrata.core.meta_memo import meta_key


def _counting(monkeypatch) -> list[str]:
    calls: list[str] = []
    original = builder.infer_meta

    def counting(op, args, kwargs):
        calls.append(op.name)
        return original(op, args, kwargs)

    monkeypatch.setattr(builder, "infer_meta", counting)
    return calls


def test_identical_symbolic_calls_are_inferred_once(monkeypatch):
    calls = _counting(monkeypatch)
    sizes = SymbolicSizes({"L['x']": [0]})
    b = GraphBuilder(Level.PRIMS)
    with symbolic_scope(sizes):
        meta = input_meta("L['x']", torch.randn(16, 8))
        x = b.input("x", meta)
        y = b.input("y", meta)
        first = b.call(prim("exp"), x)
        second = b.call(prim("exp"), y)  # another node, the same metadata
        b.call(prim("mul"), x, 0.0)
        b.call(prim("mul"), x, -0.0)  # another argument
        wide = b.call(prim("broadcast_in_dim"), x, (meta.shape[0], 8, 2), (0, 1))
    assert calls == ["prims.exp", "prims.mul", "prims.mul", "prims.broadcast_in_dim"]
    assert second.meta is first.meta
    assert wide.meta.shape[2] == 2 and wide.meta.shape[0] is not None


def test_static_sizes_are_inferred_every_time(monkeypatch):
    calls = _counting(monkeypatch)
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 8), torch.float32))
    b.call(prim("exp"), x)
    b.call(prim("exp"), x)
    assert calls == ["prims.exp", "prims.exp"]


def test_keys_tell_apart_what_inference_could_tell_apart():
    sizes = SymbolicSizes({"L['x']": [0]})
    with symbolic_scope(sizes):
        meta = input_meta("L['x']", torch.randn(16, 8))
    op = prim("add")
    assert meta_key(op, (meta, 1), {}) != meta_key(op, (meta, 1.0), {})
    assert meta_key(op, (meta, 1), {}) != meta_key(op, (meta, True), {})
    other = TensorMeta(meta.shape, torch.float64, strides=meta.strides)
    assert meta_key(op, (meta, 1), {}) != meta_key(op, (other, 1), {})
    assert meta_key(op, (meta, object()), {}) is None  # no structural key: inferred
