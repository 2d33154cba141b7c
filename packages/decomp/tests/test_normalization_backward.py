"""Softmax backward, layer/group/batch norm forward and backward, through two-op graphs
(forward then backward) so the saved statistics are the real ones."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, aten

FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _graph(build):
    b = GraphBuilder(Level.ATEN)
    outputs = build(b)
    return b.build(outputs)


def _outs(b, node, n):
    return [b.getitem(node, i) for i in range(n)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["_softmax", "_log_softmax"])
def test_softmax_backward(dh, op: str, dtype: torch.dtype) -> None:
    def build(b):
        x = b.input("x", TensorMeta((4, 7), dtype, strides=(1, 4)))
        g = b.input("g", TensorMeta((4, 7), dtype))
        y = b.call(aten(f"{op}.default"), x, 1, False)
        return [b.call(aten(f"{op}_backward_data.default"), g, y, 1, dtype)]

    dh.check(_graph(build))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_backward(dh, dtype: torch.dtype, affine: bool) -> None:
    def build(b):
        x = b.input("x", TensorMeta((3, 4, 5), dtype))
        w = b.input("w", TensorMeta((4, 5), dtype)) if affine else None
        bias = b.input("bias", TensorMeta((4, 5), dtype)) if affine else None
        g = b.input("g", TensorMeta((3, 4, 5), dtype))
        _, mean, rstd = _outs(
            b, b.call(aten("native_layer_norm.default"), x, [4, 5], w, bias, 1e-5), 3
        )
        mask = [True, affine, affine]
        back = b.call(
            aten("native_layer_norm_backward.default"), g, x, [4, 5], mean, rstd, w, bias, mask
        )
        return _outs(b, back, 3 if affine else 1)

    dh.check(_graph(build))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_forward_and_backward(dh, dtype: torch.dtype, affine: bool) -> None:
    def build(b):
        x = b.input("x", TensorMeta((2, 6, 5), dtype))
        w = b.input("w", TensorMeta((6,), dtype)) if affine else None
        bias = b.input("bias", TensorMeta((6,), dtype)) if affine else None
        g = b.input("g", TensorMeta((2, 6, 5), dtype))
        out, mean, rstd = _outs(
            b, b.call(aten("native_group_norm.default"), x, w, bias, 2, 6, 5, 3, 1e-5), 3
        )
        mask = [True, affine, affine]
        back = b.call(
            aten("native_group_norm_backward.default"), g, x, mean, rstd, w, 2, 6, 5, 3, mask
        )
        return [out, mean, rstd, *_outs(b, back, 3 if affine else 1)]

    dh.check(_graph(build))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_forward_and_backward(dh, dtype: torch.dtype, training: bool) -> None:
    def positive(inputs):
        inputs[4].abs_().add_(0.5)  # running_var

    def build(b):
        x = b.input("x", TensorMeta((4, 3, 5), dtype, strides=(1, 20, 4)))
        w = b.input("w", TensorMeta((3,), dtype))
        bias = b.input("bias", TensorMeta((3,), dtype))
        rm = b.input("rm", TensorMeta((3,), dtype))
        rv = b.input("rv", TensorMeta((3,), dtype))
        g = b.input("g", TensorMeta((4, 3, 5), dtype))
        if training:
            fwd = b.call(aten("_native_batch_norm_legit.no_stats"), x, w, bias, True, 0.1, 1e-5)
        else:
            fwd = b.call(
                aten("_native_batch_norm_legit_no_training.default"), x, w, bias, rm, rv, 0.1, 1e-5
            )
        out, mean, invstd = _outs(b, fwd, 3)
        back = b.call(
            aten("native_batch_norm_backward.default"),
            g, x, w, rm, rv, mean, invstd, training, 1e-5, [True, True, True],
        )  # fmt: skip
        outs = [out, *_outs(b, back, 3)]
        return [*outs, mean, invstd] if training else outs

    dh.check(_graph(build), prepare=positive)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
def test_batch_norm_functional_updates_running_stats(dh, dtype: torch.dtype) -> None:
    graph = dh.one_op(
        "_native_batch_norm_legit_functional.default",
        dh.T(4, 3, 2, dtype=dtype),
        dh.T(3, dtype=dtype),
        dh.T(3, dtype=dtype),
        dh.T(3, dtype=dtype),
        dh.T(3, dtype=dtype),
        True,
        0.1,
        1e-5,
        outputs=5,
    )
    dh.check(graph)
    dh.check(
        dh.one_op(
            "native_batch_norm.default",
            dh.T(4, 3, dtype=dtype),
            None,
            None,
            dh.T(3, dtype=dtype),
            dh.T(3, dtype=dtype),
            False,
            0.1,
            1e-5,
            outputs=1,
        ),
        prepare=lambda inputs: inputs[2].abs_(),
    )
