"""``native_dropout`` (what ``F.dropout`` records on CUDA) compiled end to end: its mask
is drawn inside the generated kernel (``prims.rand``), not by ATen ops over index tensors,
on the C++ backend and Triton's interpreter. The stream is ours, so the checks are the
mask's rate, output and gradient consistent with the mask, and ``torch.manual_seed``
control."""

from __future__ import annotations

import pytest
import torch

import torchstrata.runtime as rt


def _dropout(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.native_dropout(x, 0.2, True)


@pytest.mark.parametrize("codegen", ["cpp", pytest.param("triton", marks=pytest.mark.triton)])
def test_native_dropout_draws_its_mask_in_the_kernel(codegen):
    x = torch.randn(256, 96, requires_grad=True)
    report = rt.explain(rt.compile(_dropout, codegen=codegen), x)
    assert report.eager_ops == ("aten.randint.low",)  # the seed only
    assert any("prims.rand" in kernel.ops for kernel in report.kernels)
    compiled = rt.compile(_dropout, codegen=codegen)
    torch.manual_seed(11)
    out, mask = compiled(x)
    assert mask.dtype is torch.bool and abs((1 - mask.float().mean().item()) - 0.2) < 0.02
    torch.testing.assert_close(out, x.detach() * mask / 0.8)
    out.backward(torch.ones_like(out))
    torch.testing.assert_close(x.grad, mask / 0.8)
    torch.manual_seed(11)
    assert torch.equal(compiled(x)[1], mask)  # the seed comes from torch's generator
    assert not torch.equal(compiled(x)[1], mask)  # and each call draws a new mask
