"""View, copy, cast and creation rules: same logical values as ATen's strided views."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, aten, interpret, random_inputs
from torchstrata.decomp import decompose_with_stats

DTYPES = (torch.float32, torch.float16, torch.int64, torch.bool)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reshapes(dh, dtype: torch.dtype) -> None:
    for op in ("view.default", "reshape.default", "_unsafe_view.default"):
        dh.check(dh.one_op(op, dh.T(4, 6, dtype=dtype), [2, -1, 3]))
    dh.check(dh.one_op("reshape.default", dh.transposed(4, 6, dtype), [24]))
    dh.check(dh.one_op("view.default", dh.T(4, 6, dtype=dtype), [4, 6]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_permutations(dh, dtype: torch.dtype) -> None:
    dh.check(dh.one_op("permute.default", dh.T(2, 3, 4, dtype=dtype), [2, 0, -2]))
    dh.check(dh.one_op("transpose.int", dh.transposed(3, 4, dtype), -1, 0))
    dh.check(dh.one_op("t.default", dh.transposed(3, 4, dtype)))
    dh.check(dh.one_op("t.default", dh.T(5, dtype=dtype)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_unsqueeze_squeeze_expand(dh, dtype: torch.dtype) -> None:
    dh.check(dh.one_op("unsqueeze.default", dh.transposed(3, 4, dtype), -1))
    dh.check(dh.one_op("unsqueeze.default", dh.T(3, 4, dtype=dtype), 1))
    dh.check(dh.one_op("squeeze.default", dh.T(3, 1, 4, 1, dtype=dtype)))
    dh.check(dh.one_op("squeeze.dim", dh.T(3, 1, 4, 1, dtype=dtype), -1))
    dh.check(dh.one_op("squeeze.dims", dh.T(3, 1, 4, 1, dtype=dtype), [0, 1]))
    dh.check(dh.one_op("expand.default", dh.T(3, 1, dtype=dtype), [2, 3, -1, 5][:3]))
    dh.check(dh.one_op("expand.default", dh.transposed(1, 4, dtype), [3, 4]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_select(dh, dtype: torch.dtype) -> None:
    x = dh.transposed(6, 8, dtype)
    dh.check(dh.one_op("slice.Tensor", x, 1, 2, 7, 2))
    dh.check(dh.one_op("slice.Tensor", x, -2, -3, None))
    dh.check(dh.one_op("slice.Tensor", x, 0, 1, 2**62))
    dh.check(dh.one_op("slice.Tensor", x, 0, 5, 2))  # empty
    dh.check(dh.one_op("select.int", x, 0, -1))
    dh.check(dh.one_op("select.int", x, -1, 3))


def test_views_chain_on_non_contiguous_input(dh) -> None:
    builder = GraphBuilder(Level.ATEN)
    x = builder.input("x", TensorMeta((4, 6), torch.float32, strides=(1, 4)))
    t = builder.call(aten("t.default"), x)
    v = builder.call(aten("view.default"), t, [3, 8])
    s = builder.call(aten("slice.Tensor"), v, 1, 1, 8, 3)
    e = builder.call(aten("unsqueeze.default"), s, 0)
    out = builder.call(aten("expand.default"), e, [2, 3, 3])
    dh.check(builder.build([out, s]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_casts(dh, dtype: torch.dtype) -> None:
    for target in (torch.float32, torch.bfloat16, torch.int32, torch.bool):
        copy = dh.one_op("_to_copy.default", dh.transposed(3, 4, dtype), dtype=target)
        dh.check(copy)  # a same-dtype copy of an input is an explicit prims copy
        dh.check(dh.one_op("to.dtype", dh.T(3, 4, dtype=dtype), target))


def test_copies_of_inputs_stay_copies(dh) -> None:
    builder = GraphBuilder(Level.ATEN)
    x = builder.input("x", TensorMeta((3, 4), torch.float32))
    copied = builder.call(aten("clone.default"), builder.call(aten("t.default"), x))
    inner = builder.call(aten("clone.default"), builder.call(aten("exp.default"), x))
    same = builder.call(aten("_to_copy.default"), x, dtype=torch.float32)
    graph = builder.build([copied, inner, same])
    prims, stats = decompose_with_stats(graph)
    assert not stats.extern
    assert stats.decomposed == {
        "aten.clone.default": 2,
        "aten._to_copy.default": 1,
        "aten.t.default": 1,
        "aten.exp.default": 1,
    }
    copies = [n for n in prims.nodes if n.op.name == "prims.mul"]
    assert len(copies) == 2  # the copy of a fresh value vanishes; copies of inputs stay
    (x_value,) = random_inputs(graph)
    outputs = interpret(prims, x_value)
    assert all(out.data_ptr() != x_value.data_ptr() for out in outputs)
    dh.check(graph)


def test_creation(dh) -> None:
    dh.check(dh.one_op("full.default", [2, 3], 1.5))
    dh.check(dh.one_op("full.default", [2, 3], 7, dtype=torch.int32))
    dh.check(dh.one_op("full.default", [2], True))
    dh.check(dh.one_op("zeros.default", [4], dtype=torch.float16))
    dh.check(dh.one_op("ones.default", [2, 2]))
    dh.check(dh.one_op("scalar_tensor.default", 2.5, dtype=torch.float64))
    dh.check(dh.one_op("zeros_like.default", dh.T(2, 3, dtype=torch.int64)))
    dh.check(dh.one_op("ones_like.default", dh.transposed(2, 3)))
    dh.check(dh.one_op("full_like.default", dh.T(2, 3), -1.0))
