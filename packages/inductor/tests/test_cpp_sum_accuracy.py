"""Float32 sums in the C++ backend add in blocks of float SIMD lanes and a double total.

Each case sums many equal float32 values, whose rounding errors all lean the same way
when one float accumulator per SIMD lane adds them one after another (hundreds of ulps
over 70001 of them); the blocked sums stay within a few ulps of the float64 answer.
"""

from __future__ import annotations

import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim

LENGTH = 70001
VALUES = (-2.3104217, 0.1, 0.36787945)


def _compile(ind, shape: tuple[int, ...], body):
    """``body(builder, x)`` over a float32 input of ``shape``, compiled by the C++ backend."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(shape, torch.float32))
    compiled = ind.compile(b.build([body(b, x)]), "cpp")
    return lambda value: compiled(value)[0]


def _ulps(got: torch.Tensor, exact: torch.Tensor) -> float:
    """The largest error of ``got`` in float32 ulps of ``exact``'s magnitude."""
    spacing = torch.finfo(torch.float32).eps * exact.abs().clamp_min(1e-30)
    return ((got.double() - exact) / spacing).abs().max().item()


def test_row_sum_of_equal_values_is_accurate(ind):
    fn = _compile(ind, (2, LENGTH), lambda b, x: b.call(prim("sum"), x, (1,)))
    for value in VALUES:
        x = torch.full((2, LENGTH), value, dtype=torch.float32)
        assert _ulps(fn(x), x.double().sum(-1)) <= 3


def test_column_sum_of_equal_values_is_accurate(ind):
    fn = _compile(ind, (LENGTH, 8), lambda b, x: b.call(prim("sum"), x, (0,)))
    for value in VALUES:
        x = torch.full((LENGTH, 8), value, dtype=torch.float32)
        assert _ulps(fn(x), x.double().sum(0)) <= 3


def test_long_row_softmax_is_accurate(ind):
    # One element above the rest: the sum adds LENGTH - 1 copies of exp(-1).
    fn = _compile(ind, (2, LENGTH), ind.softmax_last)
    x = torch.zeros(2, LENGTH, dtype=torch.float32)
    x[:, 7] = 1.0
    assert _ulps(fn(x), torch.softmax(x.double(), -1)) <= 4


def test_lane_sums_cover_every_element(ind):
    # Long sums add in 32 float lanes, flushed every 256 elements: lengths with a partial
    # block, a partial set of lanes, both, and a sum over two dims (lanes kept across the
    # outer one). Integer values sum exactly, so a skipped or doubled element shows.
    for shape, dims in (
        ((3, 257), (1,)),
        ((3, 288), (1,)),
        ((2, 4096 + 31), (1,)),
        ((2, 5, 300), (1, 2)),
    ):
        fn = _compile(ind, shape, lambda b, x, dims=dims: b.call(prim("sum"), x, dims))
        x = torch.randint(-1000, 1000, shape, generator=torch.Generator().manual_seed(1))
        x = x.to(torch.float32)
        assert torch.equal(fn(x), x.sum(dims)), shape
