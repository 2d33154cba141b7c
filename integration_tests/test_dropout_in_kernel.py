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


@pytest.mark.parametrize("codegen", ["cpp", pytest.param("triton", marks=pytest.mark.triton)])
def test_cpu_dropout_mask_is_drawn_in_the_kernel(codegen):
    """On CPU, ``F.dropout`` records ``bernoulli_`` of an ``empty_like``: that too is
    drawn in the kernel that scales the input (ATen's generator took 29 of K6's 55 ms)."""

    def dropout(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x, 0.25, training=True)

    x = torch.randn(128, 80, requires_grad=True)
    compiled = rt.compile(dropout, codegen=codegen)
    report = rt.explain(compiled, x)
    assert report.eager_ops == ("aten.randint.low",)
    torch.manual_seed(5)
    out = compiled(x)
    kept = out != 0
    assert abs((1 - kept.float().mean().item()) - 0.25) < 0.03
    torch.testing.assert_close(out, x.detach() * kept / 0.75)
    out.backward(torch.ones_like(out))
    torch.testing.assert_close(x.grad, kept / 0.75)
    torch.manual_seed(5)
    assert torch.equal(compiled(x), out)
