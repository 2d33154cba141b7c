"""Regression tests for compiler bugs the differential fuzzer (``test_fuzz_kernels.py``)
found: each case, shrunk, compiled and compared with the reference interpreter and with
a float64 evaluation of the same graph."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, interpret, prim

CPU_BACKENDS = ["cpp", pytest.param("triton", marks=pytest.mark.triton)]


def _sibling_module(name: str) -> ModuleType:
    """Import ``<name>.py`` next to this file (the tests directories are not packages)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_fuzz = _sibling_module("test_fuzz_kernels")


@pytest.mark.parametrize("codegen", CPU_BACKENDS)
def test_long_float32_sum_of_equal_values_is_accurate(ind, codegen):
    # The C++ kernel added 70001 copies of a float32 value in float accumulators, one per
    # SIMD lane, each element after the other: the rounding errors all leaned the same way
    # and the sum came out 4e-5 off (torch's cascade sum: 1e-7). Float32 sums now add in
    # double (cpp_codegen._accumulator_type).
    rows = 70001
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((1,), torch.float32))
    column = b.call(prim("broadcast_in_dim"), x, (rows, 1), (1,))
    graph = b.build([b.call(prim("sum"), column, (0,))])
    value = torch.tensor([-2.3104217])
    (got,) = ind.compile(graph, codegen)(value)
    exact = torch.tensor([rows * value.double().item()])
    (eager,) = interpret(graph, value)
    assert abs(got.double() - exact).item() <= 3 * max(
        abs(eager.double() - exact).item(), torch.finfo(torch.float32).eps * abs(exact).item()
    )


@pytest.mark.parametrize("codegen", CPU_BACKENDS)
def test_long_sum_of_a_picked_value_matches_the_interpreter(ind, codegen):
    # The fuzzer's shrunk case, as it printed it: sum_3 adds 70001 copies of in1[0, 0]
    # (where_1 picks it out, and mul_1 is 0, so the division is by 1); C++ returned
    # -161793.84 for -161731.13.
    case = _fuzz.FuzzCase.from_text(
        """
graph prims {
  %in1: f32[70001, 1] = input
  %iota: i64[2] = prims.iota(2, 0, 1, torch.int64, device('cpu'))
  %broadcast_in_dim: i64[2] = prims.broadcast_in_dim(%iota, (2,), (0,))
  %lt: b8[2] = prims.lt(%broadcast_in_dim, 0)
  %sum: f32[70001] = prims.sum(%in1, (1,))
  %div: f32[70001] = prims.div(%sum, 1.0)
  %broadcast_in_dim_1: f32[70001, 1]{1, 0} = prims.broadcast_in_dim(%div, (70001, 1), (0,))
  %sub: f32[70001, 1] = prims.sub(%in1, %broadcast_in_dim_1)
  %mul: f32[70001, 1] = prims.mul(%sub, %sub)
  %sum_1: f32[70001] = prims.sum(%mul, (1,))
  %div_1: f32[70001] = prims.div(%sum_1, 1.0)
  %add: f32[70001] = prims.add(%div_1, 0.1)
  %rsqrt: f32[70001] = prims.rsqrt(%add)
  %broadcast_in_dim_2: f32[70001, 1]{1, 0} = prims.broadcast_in_dim(%rsqrt, (70001, 1), (0,))
  %mul_1: f32[70001, 1] = prims.mul(%sub, %broadcast_in_dim_2)
  %iota_1: i64[70001] = prims.iota(70001, 0, 1, torch.int64, device('cpu'))
  %broadcast_in_dim_3: i64[70001] = prims.broadcast_in_dim(%iota_1, (70001,), (0,))
  %convert_element_type: i64[2] = prims.convert_element_type(%lt, torch.int64)
  %slice: i64[1] = prims.slice(%convert_element_type, (0,), (1,), (1,))
  %broadcast_in_dim_4: i64[1] = prims.broadcast_in_dim(%slice, (1,), (0,))
  %broadcast_in_dim_5: i64[70001]{0} = prims.broadcast_in_dim(%broadcast_in_dim_4, (70001,), (0,))
  %eq: b8[70001] = prims.eq(%broadcast_in_dim_3, %broadcast_in_dim_5)
  %full_1: f32[70001] = prims.full((70001,), 0, torch.float32, device('cpu'))
  %where_1: f32[70001] = prims.where(%eq, %div, %full_1)
  %sum_2: f32[] = prims.sum(%where_1, (0,))
  %broadcast_in_dim_6: f32[70001, 1]{0, 0} = prims.broadcast_in_dim(%sum_2, (70001, 1), ())
  %abs: f32[70001, 1] = prims.abs(%mul_1)
  %maximum: f32[70001, 1] = prims.maximum(%abs, 1.0)
  %div_2: f32[70001, 1] = prims.div(%broadcast_in_dim_6, %maximum)
  %maximum_1: f32[70001, 1] = prims.maximum(%div_2, %div_2)
  %sum_3: f32[1] = prims.sum(%maximum_1, (0,))
  return %sum_3
}
"""
    )
    _fuzz.check_case(ind, case, codegen)
