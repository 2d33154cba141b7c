"""float16/bfloat16: loads widen to float32, reductions accumulate in float32."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import assert_close_to_eager, interpret, random_inputs


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_demo_low_precision_against_fp64(ind, codegen, dtype):
    graph = ind.demo_graph(9, 300, dtype)
    compiled = ind.compile(graph, codegen)
    assert len(compiled.kernels) == 1
    inputs = random_inputs(graph, seed=0)
    expected = interpret(graph, *inputs)
    reference = interpret(ind.demo_graph(9, 300, torch.float64), *[t.double() for t in inputs])
    actual = compiled(*inputs)
    assert actual[0].dtype == dtype
    assert_close_to_eager(actual, expected, reference=[r.to(torch.float64) for r in reference])
