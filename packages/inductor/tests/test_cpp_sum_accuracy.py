"""Float32 sums in the C++ backend add in blocks of float SIMD lanes and a double total.

Each case sums many equal float32 values, whose rounding errors all lean the same way
when one float accumulator per SIMD lane adds them one after another (hundreds of ulps
over 70001 of them); the blocked sums stay within a few ulps of the float64 answer.
"""

from __future__ import annotations

import tempfile

import torch

import torchstrata.runtime as rt

LENGTH = 70001
VALUES = (-2.3104217, 0.1, 0.36787945)


def _compile(fn):
    return rt.compile(fn, options={"cache_dir": tempfile.mkdtemp()})


def _ulps(got: torch.Tensor, exact: torch.Tensor) -> float:
    """The largest error of ``got`` in float32 ulps of ``exact``'s magnitude."""
    spacing = torch.finfo(torch.float32).eps * exact.abs().clamp_min(1e-30)
    return ((got.double() - exact) / spacing).abs().max().item()


def test_row_sum_of_equal_values_is_accurate():
    fn = _compile(lambda x: x.sum(-1))
    for value in VALUES:
        x = torch.full((2, LENGTH), value, dtype=torch.float32)
        assert _ulps(fn(x), x.double().sum(-1)) <= 3


def test_column_sum_of_equal_values_is_accurate():
    fn = _compile(lambda x: x.sum(0))
    for value in VALUES:
        x = torch.full((LENGTH, 8), value, dtype=torch.float32)
        assert _ulps(fn(x), x.double().sum(0)) <= 3


def test_long_row_softmax_is_accurate():
    # One element above the rest: the sum adds LENGTH - 1 copies of exp(-1).
    fn = _compile(lambda x: torch.softmax(x, -1))
    x = torch.zeros(2, LENGTH, dtype=torch.float32)
    x[:, 7] = 1.0
    assert _ulps(fn(x), torch.softmax(x.double(), -1)) <= 4
