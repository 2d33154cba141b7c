"""``InductorOptions(half_roundings=False)``: a 16-bit chain's round trips through 16 bits
dropped from a kernel (half_roundings.py); compiled end to end in
integration_tests/test_half_roundings_compiled.py."""

from __future__ import annotations

import torch

from torchstrata.core import InductorOptions
from torchstrata.inductor.codegen.half_roundings import _unrounded, drop_half_roundings
from torchstrata.inductor.ir.exprs import Load, Op, walk
from torchstrata.inductor.ir.indexing import Index


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


def test_kernels_without_round_trips_are_unchanged():
    from torchstrata.inductor.ir.kernel import Kernel

    empty = Kernel("k", (8,), (), (), (), (), ())
    assert drop_half_roundings(empty) is empty


def test_from_env_reads_the_switch():
    assert not InductorOptions.from_env({"TORCHSTRATA_HALF_ROUNDINGS": "0"}).half_roundings
    assert InductorOptions.from_env({}).half_roundings
