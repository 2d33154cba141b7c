"""The acceptance case: softmax(gelu(x + b), -1) is one fused kernel that matches eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchstrata.core import random_inputs


@pytest.mark.parametrize("shape", [(64, 128), (37, 203), (1, 5), (3, 1)])
def test_demo_is_one_kernel_matching_eager(ind, codegen, shape):
    graph = ind.demo_graph(*shape)
    compiled = ind.check(graph, codegen, seeds=(0, 1))
    assert len(compiled.kernels) == 1
    assert compiled.kernels[0].backend == ind.backend(codegen)
    assert compiled.eager_ops == ()
    x, b = random_inputs(graph, seed=3)
    torch.testing.assert_close(compiled(x, b)[0], torch.softmax(F.gelu(x + b), -1))


def test_demo_kernel_reports_its_ops(ind, codegen):
    kernel = ind.compile(ind.demo_graph(8, 16), codegen).kernels[0]
    for op in ("prims.erf", "prims.amax", "prims.sum", "prims.div"):
        assert op in kernel.ops
    assert kernel.source and kernel.path


def test_zero_rows(ind, codegen):
    compiled = ind.check(ind.demo_graph(0, 16), codegen)
    assert compiled.kernels == ()


def test_long_rows_use_a_looped_reduction(ind, codegen):
    ind.check(ind.demo_graph(3, 5000), codegen, seeds=(0,))


def test_non_contiguous_input(ind, codegen):
    ind.check(ind.demo_graph(6, 10, x_strides=(1, 6)), codegen)
