"""nll_loss forward/backward, embedding and its backward, dropout."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import OpKind, interpret, random_inputs
from torchstrata.decomp import decompose_with_stats

FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
LONG = torch.int64


def _targets(classes: int, ignore: int | None = None):
    def prepare(inputs):
        for t in inputs:
            if t.dtype is LONG:
                t.remainder_(classes)
                if ignore is not None:
                    t.view(-1)[0] = ignore

    return prepare


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_forward_and_backward(dh, dtype, reduction: int, weighted: bool) -> None:
    weight = dh.T(5, dtype=dtype) if weighted else None
    forward = dh.one_op(
        "nll_loss_forward.default", dh.T(6, 5, dtype=dtype), dh.T(6, dtype=LONG), weight,
        reduction, 2, outputs=2,
    )  # fmt: skip
    dh.check(forward, prepare=_targets(5, ignore=2))
    grad = dh.T(6, dtype=dtype) if reduction == 0 else dh.T(dtype=dtype)
    backward = dh.one_op(
        "nll_loss_backward.default", grad, dh.T(6, 5, dtype=dtype), dh.T(6, dtype=LONG), weight,
        reduction, 2, dh.T(dtype=dtype),
    )  # fmt: skip
    dh.check(backward, prepare=_targets(5, ignore=2))


def test_nll_loss_of_one_sample(dh) -> None:
    dh.check(
        dh.one_op("nll_loss_forward.default", dh.T(5), dh.T(dtype=LONG), None, 1, -100, outputs=2),
        prepare=_targets(5),
    )
    dh.check(
        dh.one_op(
            "nll_loss_backward.default", dh.T(), dh.T(5), dh.T(dtype=LONG), None, 1, -100, dh.T()
        ),
        prepare=_targets(5),
    )


@pytest.mark.parametrize("dtype", FLOATS)
def test_embedding_and_backward(dh, dtype) -> None:
    dh.check(
        dh.one_op("embedding.default", dh.transposed(7, 4, dtype), dh.T(2, 3, dtype=LONG)),
        prepare=_targets(7),
    )
    for padding_idx, scale in ((-1, False), (3, True)):
        dh.check(
            dh.one_op(
                "embedding_dense_backward.default",
                dh.T(2, 3, 4, dtype=dtype),
                dh.T(2, 3, dtype=LONG),
                7,
                padding_idx,
                scale,
            ),
            prepare=_targets(7),
        )


def test_dropout_is_deterministic_per_seed_and_scales(dh) -> None:
    graph = dh.one_op("native_dropout.default", dh.T(64, 64), 0.25, True, outputs=2)
    prims, stats = decompose_with_stats(graph)
    assert stats.decomposed["aten.native_dropout.default"] == 1
    assert any(op.kind is OpKind.PRIMS and op.name == "prims.rand" for op in prims.ops())
    (x,) = random_inputs(graph)
    torch.manual_seed(0)
    out, mask = interpret(prims, x)
    torch.manual_seed(0)
    again, _ = interpret(prims, x)
    assert torch.equal(out, again) and mask.dtype is torch.bool
    assert abs(mask.float().mean().item() - 0.75) < 0.03
    torch.testing.assert_close(out, torch.where(mask, x / 0.75, 0.0))
    dh.check(dh.one_op("native_dropout.default", dh.T(3, 4), 0.5, False, outputs=2))


@pytest.mark.parametrize("dtype", FLOATS)
def test_bernoulli_p_draws_with_prims_rand(dh, dtype) -> None:
    """``bernoulli.p`` (dropout's mask on CPU) is ``rand < p`` in the input's dtype."""
    graph = dh.one_op("bernoulli.p", dh.T(128, 64, dtype=dtype), 0.3)
    prims, stats = decompose_with_stats(graph)
    assert stats.decomposed["aten.bernoulli.p"] == 1
    names = [op.name for op in prims.ops()]
    assert "prims.rand" in names and "aten.bernoulli.p" not in names
    (x,) = random_inputs(graph)
    torch.manual_seed(1)
    (drawn,) = interpret(prims, x)
    torch.manual_seed(1)
    assert torch.equal(drawn, interpret(prims, x)[0])
    assert drawn.dtype is dtype and set(drawn.unique().tolist()) == {0.0, 1.0}
    assert abs(drawn.float().mean().item() - 0.3) < 0.03


@pytest.mark.parametrize("p", [1.5, -0.1, float("nan")])
def test_bernoulli_p_out_of_range_stays_with_aten(dh, p) -> None:
    """Eager raises for p outside [0, 1]: the op is left to ATen, which does."""
    prims, _ = decompose_with_stats(dh.one_op("bernoulli.p", dh.T(4, 4), p))
    assert "aten.bernoulli.p" in [op.name for op in prims.ops()]


@pytest.mark.parametrize("dtype", FLOATS)
def test_dropout_backward(dh, dtype) -> None:
    dh.check(
        dh.one_op(
            "native_dropout_backward.default",
            dh.T(3, 4, dtype=dtype),
            dh.T(3, 4, dtype=torch.bool),
            2.0,
        )
    )
