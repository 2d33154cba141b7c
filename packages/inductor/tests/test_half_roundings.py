"""``InductorOptions(half_roundings=False)``: a 16-bit chain kept in float32 through a
fused kernel, rounded only where stored, as torch.compile computes (half_roundings.py)."""

from __future__ import annotations

import pytest
import torch

import torchstrata.runtime as tsr
from torchstrata.core import CompileOptions, InductorOptions
from torchstrata.inductor.codegen.half_roundings import _unrounded, drop_half_roundings
from torchstrata.inductor.ir.exprs import Load, Op, walk
from torchstrata.inductor.ir.indexing import Index

DTYPES = [torch.bfloat16, torch.float16]


def _silu_mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x) * y


def _compiled(codegen: str, half_roundings: bool):
    options = CompileOptions(inductor=InductorOptions(half_roundings=half_roundings))
    return tsr.compile(_silu_mul, codegen=codegen, options=options)


def _round_trips(expr) -> int:
    return sum(
        1
        for node in walk(expr)
        if isinstance(node, Op)
        and node.name == "convert_element_type"
        and isinstance(node.args[0], Op)
        and node.args[0].name == "convert_element_type"
        and node.args[0].dtype in (torch.bfloat16, torch.float16)
    )


def test_a_round_trip_through_16_bits_is_dropped():
    load = Load("x", Index(), torch.float32)
    square = Op("mul", (load, load), torch.float32)
    narrow = Op("convert_element_type", (square,), torch.bfloat16)
    wide = Op("convert_element_type", (narrow,), torch.float32)
    total = Op("add", (wide, load), torch.float32)
    assert _round_trips(total) == 1
    assert _unrounded(wide) is square
    double = Op("convert_element_type", (narrow,), torch.float64)
    assert _unrounded(double) == Op("convert_element_type", (square,), torch.float64)
    # a 16-bit value loaded and widened is no round trip; nor is a narrowing alone
    loaded = Op("convert_element_type", (Load("h", Index(), torch.bfloat16),), torch.float32)
    assert _unrounded(loaded) is loaded and _unrounded(narrow) is narrow


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_float32_through_the_kernel(codegen, dtype, monkeypatch):
    if codegen == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(37, 129, generator=gen).to(dtype)
    y = torch.randn(37, 129, generator=gen).to(dtype)
    eager = _silu_mul(x, y)
    exact = _silu_mul(x.double(), y.double())
    rounding, through = _compiled(codegen, True), _compiled(codegen, False)
    assert torch.equal(rounding(x, y), eager)  # the default: eager's bits
    ours = through(x, y)
    assert ours.dtype == dtype
    # one rounding (the store's) instead of one per op: nearer the exact value than eager
    assert (ours.double() - exact).abs().max() <= (eager.double() - exact).abs().max()
    eps = torch.finfo(dtype).eps  # the roundings eager made differ by a unit at most
    torch.testing.assert_close(ours, eager, rtol=2 * eps, atol=eps)
    report = tsr.explain(through, x, y)
    (kernel,) = report.kernels
    default_source = tsr.explain(rounding, x, y).kernels[0].source
    marker = "_ts_round_bf16(" if codegen == "triton" and dtype is torch.bfloat16 else None
    if marker is not None:  # the interpreter rounds bf16 through a helper: count its calls
        assert kernel.source.count(marker) < default_source.count(marker)
    else:
        assert kernel.source != default_source


def test_kernels_without_round_trips_are_unchanged():
    from torchstrata.inductor.ir.kernel import Kernel

    empty = Kernel("k", (8,), (), (), (), (), ())
    assert drop_half_roundings(empty) is empty


def test_from_env_reads_the_switch():
    assert not InductorOptions.from_env({"TORCHSTRATA_HALF_ROUNDINGS": "0"}).half_roundings
    assert InductorOptions.from_env({}).half_roundings
