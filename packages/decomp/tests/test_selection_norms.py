"""argmax/argmin, max.dim, any/all, logsumexp, vector norms, prod, cumsum."""

from __future__ import annotations

import math

import pytest
import torch

FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


@pytest.mark.parametrize("dtype", (*FLOATS, torch.int64))
def test_arg_reductions_and_max_dim(dh, dtype: torch.dtype) -> None:
    for op in ("argmax", "argmin"):
        dh.check(dh.one_op(f"{op}.default", dh.transposed(4, 6, dtype), 1))
        dh.check(dh.one_op(f"{op}.default", dh.T(4, 6, dtype=dtype), -2, True))
        dh.check(dh.one_op(f"{op}.default", dh.T(4, 6, dtype=dtype)))
        dh.check(dh.one_op(f"{op}.default", dh.T(4, 6, dtype=dtype), None, True))
    for op in ("max.dim", "min.dim"):
        dh.check(dh.one_op(op, dh.transposed(4, 6, dtype), 0, outputs=2))
        dh.check(dh.one_op(op, dh.T(4, 6, dtype=dtype), -1, True, outputs=2))
    dh.check(dh.one_op("max.default", dh.T(4, 6, dtype=dtype)))
    dh.check(dh.one_op("min.default", dh.T(dtype=dtype)))


@pytest.mark.parametrize("dtype", (torch.float32, torch.int64, torch.bool))
def test_any_all(dh, dtype: torch.dtype) -> None:
    for op in ("any", "all"):
        dh.check(dh.one_op(f"{op}.default", dh.T(4, 6, dtype=dtype)))
        dh.check(dh.one_op(f"{op}.dim", dh.transposed(4, 6, dtype), 1, True))
        dh.check(dh.one_op(f"{op}.dims", dh.T(2, 4, 6, dtype=dtype), [0, 2]))


@pytest.mark.parametrize("dtype", FLOATS)
def test_logsumexp_and_norms(dh, dtype: torch.dtype) -> None:
    dh.check(dh.one_op("logsumexp.default", dh.transposed(4, 6, dtype), [1]))
    dh.check(dh.one_op("logsumexp.default", dh.T(4, 6, dtype=dtype), [0, 1], True))
    for ord in (2, 1, 0, 3.5, math.inf, -math.inf):
        dh.check(dh.one_op("linalg_vector_norm.default", dh.transposed(4, 6, dtype), ord, [1]))
    dh.check(dh.one_op("linalg_vector_norm.default", dh.T(4, 6, dtype=dtype), 2, None, True))


def test_logsumexp_of_infinities_and_integers(dh) -> None:
    def infs(inputs):
        inputs[0][0] = float("-inf")
        inputs[0][1, 0] = float("inf")

    dh.check(dh.one_op("logsumexp.default", dh.T(3, 4), [1]), prepare=infs)
    dh.check(dh.one_op("logsumexp.default", dh.T(3, 4, dtype=torch.int64), [1]))


@pytest.mark.parametrize("dtype", (*FLOATS, torch.int64, torch.bool))
def test_prod_and_cumsum(dh, dtype: torch.dtype) -> None:
    dh.check(dh.one_op("prod.dim_int", dh.transposed(3, 4, dtype), 1))
    dh.check(dh.one_op("prod.default", dh.T(2, 3, dtype=dtype)))
    dh.check(dh.one_op("cumsum.default", dh.transposed(3, 4, dtype), 1))
    dh.check(dh.one_op("cumsum.default", dh.T(3, 4, dtype=dtype), 0, dtype=torch.float64))


@pytest.mark.parametrize("dtype", FLOATS)
def test_std_mean_nansum_logaddexp_safe_softmax(dh, dtype: torch.dtype) -> None:
    def holes(inputs):
        inputs[0][0, 1] = float("nan")
        inputs[0][1] = float("-inf")

    dh.check(dh.one_op("std_mean.correction", dh.transposed(4, 6, dtype), [1], outputs=2))
    dh.check(dh.one_op("nansum.default", dh.T(4, 6, dtype=dtype), [1]), prepare=holes)
    dh.check(dh.one_op("logaddexp.default", dh.T(4, 6, dtype=dtype), dh.T(6, dtype=dtype)))
    dh.check(dh.one_op("_safe_softmax.default", dh.T(4, 6, dtype=dtype), 1), prepare=holes)
