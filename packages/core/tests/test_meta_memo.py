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
    aten,
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


def test_aten_calls_on_static_sizes_are_inferred_once_per_process(monkeypatch):
    """Decision 0321: an ATen call inferred on meta tensors at static sizes is kept for
    the process, by op, operand metadata, arguments and the global state inference
    reads (grad mode, default dtype); prims are inferred every time."""
    ran: list[str] = []
    original = builder._infer_on_meta_tensors

    def counting(op, args, kwargs):
        ran.append(op.name)
        return original(op, args, kwargs)

    monkeypatch.setattr(builder, "_infer_on_meta_tensors", counting)
    monkeypatch.setattr(builder, "_STATIC_METAS", {})
    mm = aten("mm.default")
    b = GraphBuilder(Level.ATEN)
    x = b.input("x", TensorMeta((5, 7), torch.float32, requires_grad=True))
    w = b.input("w", TensorMeta((7, 3), torch.float32, requires_grad=True))
    first = b.call(mm, x, w)
    second = GraphBuilder(Level.ATEN).call(mm, x, w)  # another builder, the same call
    assert ran == ["aten.mm.default"] and second.meta == first.meta
    with torch.no_grad():  # grad mode is part of the key: the result's requires_grad
        no_grad = b.call(mm, x, w)
    assert len(ran) == 2 and not no_grad.meta.requires_grad and first.meta.requires_grad
    other = b.input("y", TensorMeta((5, 7), torch.float32, strides=(1, 5)))
    b.call(mm, other, w)  # other operand strides: inferred again
    assert len(ran) == 3
    ones = aten("ones.default")
    b.call(ones, [2, 3], device="cpu")
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        wide = b.call(ones, [2, 3], device="cpu")
    finally:
        torch.set_default_dtype(default)
    assert wide.meta.dtype == torch.float64 and len(ran) == 5
