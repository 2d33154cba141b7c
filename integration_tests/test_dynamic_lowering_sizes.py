"""Symbolic lowerings (issue 33) through sizes that floor-divide, wrap around, gather,
coincide with a static dim or divide a mean: each lowered once for many sizes on the C++
codegen (decisions 0406-0409), every call compared with eager's."""

from __future__ import annotations

import pytest
import torch

import torchstrata.runtime as tsr

pytestmark = pytest.mark.usefixtures("size_counts_no_fallback")


def _run(fn, make_args, sizes) -> dict[str, int]:
    torch.manual_seed(0)
    compiled = tsr.compile(fn, dynamic=True, codegen="cpp")
    for size in sizes:
        args = make_args(size)
        got, want = compiled(*args), fn(*args)
        for value, expected in zip(got, want, strict=True):
            torch.testing.assert_close(value, expected, msg=lambda m, s=size: f"size {s}: {m}")
    return tsr.size_lowering_stats()


def halves_and_rolls(x):
    n = x.shape[0]
    # ``n // 2``, ``(n + 1) // 2`` and a roll's ``Mod(1 - n, n)``-style wrap in the kernels
    return x[: n // 2] * 2 + x[n - n // 2 :], x[::2] + 1, torch.roll(x, 1, 0) - x


def test_floor_division_and_modulo_sizes_lower_once():
    # before decision 0407 printing ``s0//2`` was a refused read: every size per size
    stats = _run(halves_and_rolls, lambda n: (torch.randn(n, 3),), [6, 7, 11, 16, 17, 33, 9])
    assert stats.get("per_size", 0) == 0, stats
    assert 1 <= stats.get("symbolic", 0) <= 3, stats


def reversed_rows(x, rows):
    return x.index_select(0, rows) * 2, x[rows] + 1


def test_a_gather_over_a_symbolic_size_checks_its_bound():
    # the bound check compares with the symbolic size (``{size}ULL`` did not compile)
    def make(n):
        return torch.randn(n, 4), torch.arange(n - 1, -1, -1)

    compiled = tsr.compile(reversed_rows, dynamic=True, codegen="cpp")
    for n in (5, 6, 9, 12):
        x, rows = make(n)
        for got, want in zip(compiled(x, rows), reversed_rows(x, rows), strict=True):
            torch.testing.assert_close(got, want)
    stats = tsr.size_lowering_stats()
    assert stats.get("per_size", 0) == 0 and stats.get("reused", 0) >= 2, stats
    x, rows = make(10)
    rows[3] = 10  # out of range at this size only: the symbolic bound, not the first's 5
    with pytest.raises(IndexError, match="out of bounds"):
        compiled(x, rows)


def broadcast_and_swap(x, b):
    # rows ``n`` beside a static 5: at n == 5 the two coincide
    return x.expand(x.shape[0], 5, 8) + b, x.transpose(0, 1) * 3


def test_a_size_equal_to_a_static_dim_at_one_call_lowers_with_the_others():
    # the scheduler and memory order matched shapes by value: at 5 rows that pinned the
    # size (``Eq(s0, 5)``, a refused read); they match by expression now (0406). The trace
    # made at 7 rows relied on ``Ne(s0, 5)``: 5 rows lower on their own, and the sizes
    # after them still run a symbolic lowering (0408)
    sizes = [7, 9, 5, 12, 6, 13]
    stats = _run(broadcast_and_swap, lambda n: (torch.randn(n, 1, 8), torch.randn(5, 1)), sizes)
    assert not [key for key in stats if "SizeRead" in key], stats
    assert stats.get("per_size", 0) <= 1, stats
    assert stats.get("reused", 0) >= 3, stats


def means_over_rows(x):
    # each divides by a size as a float (``ToFloat(s0)``: a SymFloat)
    return torch.cat([x, x * 2], dim=0).mean(0), x.var(0), x.std(1)


def test_a_mean_over_a_symbolic_size_lowers_once():
    stats = _run(means_over_rows, lambda n: (torch.randn(n, 6),), [4, 5, 9, 12, 7])
    assert stats.get("per_size", 0) == 0, stats
    assert not [key for key in stats if key.startswith("fallback")], stats


def extern_size_arguments(x):
    # topk's ``k`` and a factory's shape are sizes: the launcher prints their expressions
    return torch.topk(x, x.shape[0] // 2, dim=0).values * 2, x.new_zeros(x.shape[0] + 1, 3) + 1


def test_an_extern_op_takes_a_symbolic_size_argument():
    # refused as a launcher constant before (0381): every size lowered on its own
    stats = _run(extern_size_arguments, lambda n: (torch.randn(n, 6),), range(4, 12))
    assert stats.get("per_size", 0) == 0, stats
    assert stats.get("symbolic", 0) <= 3, stats
