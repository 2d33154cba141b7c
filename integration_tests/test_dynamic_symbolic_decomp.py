"""One decomposition for every size of a symbolic entry (decision 0280): the autograd
stage partitions the symbolic trace once, the decomp stage decomposes its forward and
backward once, and each size takes those prims graphs with its sizes made static. A
decision the decomposition took on a size is a condition of that decomposition: a size
that violates it is decomposed on its own, and every result equals eager's."""

from __future__ import annotations

import pytest
import torch

import torchstrata.runtime as rt
from torchstrata.core import create_plugin_manager, has_symbols, hookimpl
from torchstrata.decomp import override

from .test_dynamic_symbolic_aot import MeanLoss, _count_stage_calls
from .test_dynamic_symbolic_aot import _train as train

#: Sizes of the dynamic dimension (never 0 or 1).
SIZES = (16, 17, 5, 33, 3)


def _train(compiled, model, sizes, device="cpu"):
    """One SGD step per size (``[n, 16]`` inputs) through the compiled model and its eager
    twin, compared after every step (the symbolic-aot tests' loop)."""
    train(
        compiled,
        model,
        [(n, 16) for n in sizes],
        lambda shape: (torch.randn(shape, device=device),),
    )


@pytest.mark.parametrize("shared_from", [1, 3])
def test_training_entry_decomposes_once_for_every_size(monkeypatch, shared_from):
    model = MeanLoss()
    # the per-size lowerings that take the shared decomposition (a symbolic lowering,
    # decision 0395, would serve every size with one codegen call for each graph)
    options = {"shared_decomposition_from": shared_from, "symbolic_lowering": False}
    compiled = rt.compile(model, codegen="cpp", dynamic=True, options=options)
    calls = _count_stage_calls(monkeypatch, compiled.compiled_forward.pipeline)
    _train(compiled, model, SIZES)
    assert calls.count(("autograd", True)) == 1, calls
    assert calls.count(("autograd", False)) == 0, calls
    # the sizes before ``shared_from`` decompose their forward and backward; then the
    # symbolic forward and backward are decomposed once each, not two per size
    assert calls.count(("decomp", False)) == 2 * (shared_from - 1) + 2, calls
    assert calls.count(("codegen", False)) == 2 * len(SIZES), calls


class TanhByRows:
    """A decomposition of ``tanh`` that decides on its operand's row count: rows above 8
    take the ``tanh`` prim, others ``1 - 2 / (exp(2x) + 1)`` (both right). Each call
    records the rows it saw."""

    def __init__(self) -> None:
        self.seen: list[object] = []

    @hookimpl
    def torchstrata_decompositions(self):
        def tanh(ctx, x):
            rows = x.tensor_meta.shape[0]
            self.seen.append(rows)
            if rows > 8:  # on a symbolic size: a condition of the decomposition
                return ctx.prim("tanh", x)
            exp = ctx.prim("exp", ctx.prim("mul", x, 2.0))
            return ctx.prim("sub", 1.0, ctx.prim("div", 2.0, ctx.prim("add", exp, 1.0)))

        return {"aten.tanh.default": override(tanh)}


def test_a_size_outside_a_decomposition_condition_is_decomposed_on_its_own(monkeypatch):
    rule = TanhByRows()
    manager = create_plugin_manager(plugins=[("tanh_by_rows", rule)])
    model = MeanLoss()
    compiled = rt.compile(
        model,
        codegen="cpp",
        dynamic=True,
        options={"shared_decomposition_from": 1},
        pipeline=rt.Pipeline(manager),
    )
    calls = _count_stage_calls(monkeypatch, compiled.compiled_forward.pipeline)
    _train(compiled, model, SIZES)
    assert calls.count(("autograd", True)) == 1, calls
    # the symbolic decomposition (16 rows: ``s > 8``) serves 17 and 33; 5 and 3 violate
    # its condition and decompose their own forward (the backward reads the saved tanh)
    symbolic = [rows for rows in rule.seen if has_symbols(rows)]
    static = [rows for rows in rule.seen if not has_symbols(rows)]
    assert len(symbolic) == 1, rule.seen
    assert static == [5, 3], rule.seen
    assert calls.count(("decomp", False)) == 2 + len(static), calls


@pytest.mark.gpu
def test_training_entry_decomposes_once_on_cuda(monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    model = MeanLoss().cuda()
    # Triton kernels
    compiled = rt.compile(model, dynamic=True, options={"shared_decomposition_from": 1})
    calls = _count_stage_calls(monkeypatch, compiled.compiled_forward.pipeline)
    _train(compiled, model, SIZES, device="cuda")
    assert calls.count(("autograd", True)) == 1, calls
    assert calls.count(("decomp", False)) == 2, calls
