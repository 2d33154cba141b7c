"""0-dim and empty tensors, and overloads the per-family tests do not reach."""

from __future__ import annotations

import pytest
import torch

CASES = [
    ("sum.dim_IntList", lambda dh: (dh.T(), [0], True)),
    ("sum.dim_IntList", lambda dh: (dh.T(), [-1], False)),
    ("sum.dim_IntList", lambda dh: (dh.T(0, 3), [0], False)),
    ("mean.dim", lambda dh: (dh.T(), [0], False)),
    ("amax.default", lambda dh: (dh.T(), [0], True)),
    ("add.Tensor", lambda dh: (dh.T(), dh.T(dtype=torch.int64))),
    ("add.Tensor", lambda dh: (dh.T(0, 3), dh.T(3))),
    ("_softmax.default", lambda dh: (dh.T(0, 3), 1, False)),
    ("unsqueeze.default", lambda dh: (dh.T(), 0)),
    ("squeeze.dim", lambda dh: (dh.T(), 0)),
    ("transpose.int", lambda dh: (dh.T(), 0, -1)),
    ("clamp_min.default", lambda dh: (dh.T(3, dtype=torch.int64), 0.5)),
    ("clamp_max.default", lambda dh: (dh.T(3, dtype=torch.float16), 0)),
    ("rsub.Tensor", lambda dh: (dh.T(3, dtype=torch.int64), dh.T(2, 1))),
    ("where.self", lambda dh: (dh.T(3, dtype=torch.bool), dh.T(3), dh.T(3, dtype=torch.int64))),
    ("exp2.default", lambda dh: (dh.T(3, dtype=torch.int64),)),
    ("cos.default", lambda dh: (dh.T(3, dtype=torch.bfloat16),)),
    ("expm1.default", lambda dh: (dh.T(3, dtype=torch.float16),)),
    ("log2.default", lambda dh: (dh.T(3, dtype=torch.bool),)),
]


@pytest.mark.parametrize(
    "index", range(len(CASES)), ids=[f"{op}-{i}" for i, (op, _) in enumerate(CASES)]
)
def test_edge_case(dh, index: int) -> None:
    op, make_args = CASES[index]
    dh.check(dh.one_op(op, *make_args(dh)))


def test_var_with_too_few_elements_is_inf_or_nan_like_eager(dh) -> None:
    dh.check(dh.one_op("var_mean.correction", dh.T(1, 3), [0], outputs=2))
