"""Training steps through ``torchstrata.runtime.compile`` against eager: outputs and the
gradients of every input and parameter (float64 references for float32 runs)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as rt

from .models import (
    MLP,
    Dropout,
    FrozenDetached,
    TransformerBlock,
    assert_matches,
    leaf,
    step,
    twin,
)


def _compare(model, inputs, codegen, *, float64_reference: bool) -> None:
    """Our step vs eager's on twins of ``model``; eager in float64 as the reference."""
    eager_model = twin(model)
    compiled = rt.compile(model, codegen=codegen)
    ours = step(compiled, model, [leaf(t) for t in inputs])
    eager = step(eager_model, eager_model, [leaf(t) for t in inputs])
    ref = None
    if float64_reference:
        ref_model = twin(model, torch.float64)
        ref_out, ref_grads = step(ref_model, ref_model, [leaf(t, torch.float64) for t in inputs])
        ref = [ref_out, *ref_grads]
    assert_matches([ours[0], *ours[1]], [eager[0], *eager[1]], ref, what="out, grads")
    report = rt.explain(compiled, *inputs)
    assert report.graph_count == 1 and report.graph_break_count == 0


def test_mlp_float32(codegen):
    x = torch.randn(8, 16, requires_grad=True)
    _compare(MLP(), [x], codegen, float64_reference=True)


def test_transformer_block_float32(codegen):
    """LayerNorm, RMSNorm, causal SDPA, GELU and SwiGLU in one block."""
    x = torch.randn(2, 8, 32, requires_grad=True)
    _compare(TransformerBlock(), [x], codegen, float64_reference=True)


def test_frozen_parameters_and_detached_branch(codegen):
    model = FrozenDetached().double()
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    _compare(model, [x], codegen, float64_reference=False)
    assert model.a.weight.grad is None and model.a.bias.grad is not None


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_with_ignore_index(codegen, reduction):
    def loss(logits, target):
        return F.cross_entropy(logits, target, ignore_index=-1, reduction=reduction)

    logits = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([0, 4, -1, 2, -1, 1])
    compiled = rt.compile(loss, codegen=codegen)
    ours = step(compiled, None, [leaf(logits), target])
    eager = step(loss, None, [leaf(logits), target])
    assert_matches([ours[0], ours[1][0]], [eager[0], eager[1][0]], what="loss, grad")
    assert (ours[1][0][target == -1] == 0).all()  # ignored rows get no gradient


def test_dropout_statistics_and_mask_reuse(codegen):
    p = 0.3
    model = Dropout(dim=64, p=p)
    compiled = rt.compile(model, codegen=codegen)
    x = torch.randn(128, 64, requires_grad=True)
    y = compiled(x)
    y.backward(torch.ones_like(y))
    kept = y != 0
    # Same distribution as eager: drop rate ~p (n = 8192, 5 sigma ~ 0.025), and kept
    # values scaled by 1/(1-p) exactly.
    assert abs(1 - kept.double().mean().item() - p) < 0.03
    unscaled = model.lin(x).detach()
    torch.testing.assert_close(y[kept], unscaled[kept] / (1 - p))
    # The backward reuses the forward's mask: d y / d lin(x) is 1/(1-p) on kept
    # entries, 0 on dropped ones; hence the weight gradient below.
    mask = kept.to(x.dtype) / (1 - p)
    torch.testing.assert_close(model.lin.bias.grad, mask.sum(0))
    torch.testing.assert_close(model.lin.weight.grad, mask.t() @ x.detach())
    torch.testing.assert_close(x.grad, mask @ model.lin.weight.detach())
    # Two calls draw different masks.
    assert not torch.equal(compiled(x) != 0, kept)
