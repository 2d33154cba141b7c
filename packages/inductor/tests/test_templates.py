"""Shape templates: a ``prims.full`` read by random ops only for its shape is allocated,
not filled (dropout's ``bernoulli.p(empty_like(r), 1 - p)``); any other read fills it."""

from __future__ import annotations

import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, aten, prim

SHAPE = (33, 17)
NOTE = "allocated, not filled"


def _graph(op: str, value: float, *extra: object, also_added: bool = False):
    """``x + op(full(value), *extra)`` (plus ``full`` itself with ``also_added``)."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(SHAPE, torch.float32))
    full = b.call(prim("full"), list(SHAPE), value, torch.float32, torch.device("cpu"))
    out = b.call(prim("add"), x, b.call(aten(op), full, *extra))
    if also_added:
        out = b.call(prim("add"), out, full)
    return b.build([out])


def _device(codegen: str) -> str:
    return "cuda" if codegen == "cuda" else "cpu"


def test_bernoulli_p_template_is_allocated_and_draws_eagers_numbers(ind, codegen):
    compiled = ind.compile(_graph("bernoulli.p", 0.0, 0.7), codegen)
    assert NOTE in compiled.launcher_source
    assert not any("prims.full" in kernel.ops for kernel in compiled.kernels)
    assert compiled.eager_ops == ("aten.bernoulli.p",)
    x = torch.randn(SHAPE)
    torch.manual_seed(3)
    got = compiled(x)[0]
    torch.manual_seed(3)  # dropout's mask in eager: bernoulli_ of a fresh tensor
    mask = torch.empty(SHAPE, device=_device(codegen)).bernoulli_(0.7).cpu()
    torch.testing.assert_close(got, x + mask, rtol=0, atol=0)
    assert 0 < int(mask.sum()) < mask.numel()


def test_rand_like_template_is_allocated(ind, codegen):
    compiled = ind.compile(_graph("rand_like.default", 5.0), codegen)
    assert NOTE in compiled.launcher_source
    x = torch.randn(SHAPE)
    torch.manual_seed(4)
    got = compiled(x)[0]
    torch.manual_seed(4)
    torch.testing.assert_close(got, x + torch.rand(SHAPE, device=_device(codegen)).cpu())


def test_bernoulli_of_probabilities_reads_the_values(ind, codegen):
    """``aten.bernoulli.default`` reads ``self`` as probabilities: 1.0 draws all ones."""
    for value in (1.0, 0.0):
        compiled = ind.compile(_graph("bernoulli.default", value), codegen)
        assert NOTE not in compiled.launcher_source
        x = torch.randn(SHAPE)
        torch.testing.assert_close(compiled(x)[0], x + value, rtol=0, atol=0)


def test_a_template_also_read_by_a_kernel_is_filled(ind, codegen):
    compiled = ind.compile(_graph("bernoulli.p", 0.25, 0.5, also_added=True), codegen)
    assert NOTE not in compiled.launcher_source
    x = torch.randn(SHAPE)
    torch.manual_seed(5)
    got = compiled(x)[0]
    torch.manual_seed(5)
    mask = torch.empty(SHAPE, device=_device(codegen)).bernoulli_(0.5).cpu()
    torch.testing.assert_close(got, x + mask + 0.25)
