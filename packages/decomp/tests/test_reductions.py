"""Reduction, softmax and layer-norm rules against the ATen graph."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import interpret, random_inputs, verify
from torchstrata.decomp import decompose

FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
ALL = (*FLOATS, torch.int64, torch.int32, torch.bool)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum(dh, dtype: torch.dtype, keepdim: bool) -> None:
    dh.check(dh.one_op("sum.dim_IntList", dh.T(3, 4, 5, dtype=dtype), [-1], keepdim))
    dh.check(dh.one_op("sum.dim_IntList", dh.transposed(6, 5, dtype), [0, -1], keepdim))
    dh.check(dh.one_op("sum.dim_IntList", dh.T(3, 4, dtype=dtype), [], keepdim))
    dh.check(dh.one_op("sum.default", dh.T(3, 4, dtype=dtype)))


@pytest.mark.parametrize("dtype", ALL)
def test_sum_with_dtype(dh, dtype: torch.dtype) -> None:
    dh.check(dh.one_op("sum.dim_IntList", dh.T(3, 4, dtype=dtype), [1], dtype=torch.float64))
    dh.check(dh.one_op("sum.default", dh.T(3, 4, dtype=dtype), dtype=torch.float32))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_mean(dh, dtype: torch.dtype, keepdim: bool) -> None:
    dh.check(dh.one_op("mean.dim", dh.transposed(6, 5, dtype), [-2], keepdim))
    dh.check(dh.one_op("mean.dim", dh.T(2, 3, 4, dtype=dtype), [0, 2], keepdim))
    dh.check(dh.one_op("mean.default", dh.T(2, 3, dtype=dtype)))
    dh.check(dh.one_op("mean.dim", dh.T(2, 3, dtype=dtype), [1], dtype=torch.float64))


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", ["amax", "amin"])
def test_amax_amin(dh, op: str, dtype: torch.dtype) -> None:
    dh.check(dh.one_op(f"{op}.default", dh.T(3, 4, 5, dtype=dtype), [-1, 0], True))
    dh.check(dh.one_op(f"{op}.default", dh.transposed(4, 5, dtype), [1]))
    dh.check(dh.one_op(f"{op}.default", dh.T(3, 4, dtype=dtype)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_var_std(dh, dtype: torch.dtype) -> None:
    x = dh.T(4, 6, dtype=dtype)
    dh.check(dh.one_op("var.correction", x, [-1]))
    dh.check(
        dh.one_op("var.correction", dh.transposed(4, 6, dtype), [0], correction=0, keepdim=True)
    )
    dh.check(dh.one_op("var.correction", x, None, correction=2))
    dh.check(dh.one_op("var.dim", x, [1], False))
    dh.check(dh.one_op("std.correction", x, [1], keepdim=True))
    dh.check(dh.one_op("var_mean.correction", x, [-1], correction=1, keepdim=True, outputs=2))
    dh.check(dh.one_op("var_mean.correction", x, outputs=2))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["_softmax", "_log_softmax"])
def test_softmax(dh, op: str, dtype: torch.dtype) -> None:
    dh.check(dh.one_op(f"{op}.default", dh.T(4, 9, dtype=dtype), -1, False))
    dh.check(dh.one_op(f"{op}.default", dh.transposed(5, 7, dtype), 0, False))
    dh.check(dh.one_op(f"{op}.default", dh.T(2, 3, 4, dtype=dtype), 1, False))
    dh.check(dh.one_op(f"{op}.default", dh.T(dtype=dtype), 0, False))
    public = op.removeprefix("_")
    dh.check(dh.one_op(f"{public}.int", dh.T(4, 9, dtype=dtype), 1))
    dh.check(dh.one_op(f"{public}.int", dh.T(4, 9, dtype=dtype), 1, torch.float64))


@pytest.mark.parametrize("op", ["_softmax", "_log_softmax"])
def test_softmax_half_to_float(dh, op: str) -> None:
    # eager's CPU kernel refuses half_to_float; compare with eager on a float32 copy
    graph = dh.one_op(f"{op}.default", dh.T(4, 9, dtype=torch.float16), -1, True)
    prims = decompose(graph)
    verify(prims)
    assert prims.outputs[0].tensor_meta.dtype is torch.float32
    (x,) = random_inputs(graph)
    expected = getattr(torch, op.removeprefix("_"))(x.float(), -1)
    torch.testing.assert_close(interpret(prims, x)[0], expected)


def test_softmax_of_infinities(dh) -> None:
    graph = dh.one_op("_softmax.default", dh.T(3, 4), -1, False)

    def infinities(inputs: list[torch.Tensor]) -> None:
        inputs[0][0] = float("-inf")
        inputs[0][1, 0] = float("inf")

    dh.check(graph, prepare=infinities)


@pytest.mark.parametrize("dtype", FLOATS)
def test_native_layer_norm(dh, dtype: torch.dtype) -> None:
    x, w, b = dh.T(4, 5, 8, dtype=dtype), dh.T(8, dtype=dtype), dh.T(8, dtype=dtype)
    dh.check(dh.one_op("native_layer_norm.default", x, [8], w, b, 1e-5, outputs=3))
    dh.check(
        dh.one_op(
            "native_layer_norm.default",
            dh.transposed(6, 8, dtype),
            [8],
            None,
            None,
            1e-6,
            outputs=3,
        )
    )
    w2 = dh.T(5, 8, dtype=dtype)
    dh.check(dh.one_op("native_layer_norm.default", x, [5, 8], w2, None, 1e-5, outputs=3))
