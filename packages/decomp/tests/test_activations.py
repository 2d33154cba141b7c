"""Activations and elementwise backward ops against eager."""

from __future__ import annotations

import pytest
import torch

FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "op, kwargs",
    [
        ("hardswish", {}),
        ("hardsigmoid", {}),
        ("mish", {}),
        ("softplus", {}),
        ("softplus", {"beta": 2, "threshold": 1}),
        ("elu", {"alpha": 0.7}),
        ("leaky_relu", {"negative_slope": 0.2}),
        ("hardtanh", {"min_val": -0.5, "max_val": 0.5}),
        ("threshold", {"threshold": 0.1, "value": -2.0}),
        ("logit", {"eps": 1e-3}),
    ],
)
def test_activations(dh, op: str, kwargs: dict, dtype: torch.dtype) -> None:
    args = list(kwargs.values())
    dh.check(dh.one_op(f"{op}.default", dh.transposed(4, 6, dtype), *args))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "op", ["sigmoid_backward", "tanh_backward", "silu_backward", "gelu_backward"]
)
def test_elementwise_backward(dh, op: str, dtype: torch.dtype) -> None:
    dh.check(dh.one_op(f"{op}.default", dh.T(4, 6, dtype=dtype), dh.transposed(4, 6, dtype)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_gelu_backward_tanh_and_threshold_backward(dh, dtype: torch.dtype) -> None:
    dh.check(
        dh.one_op(
            "gelu_backward.default", dh.T(5, dtype=dtype), dh.T(5, dtype=dtype), approximate="tanh"
        )
    )
    dh.check(
        dh.one_op("threshold_backward.default", dh.T(3, 5, dtype=dtype), dh.T(3, 5, dtype=dtype), 0)
    )
