"""Loads consumed by one branch of a ``where`` (a cat's pieces) are masked by its condition."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.triton.branch_loads import (
    BranchGuard,
    branch_guards,
    guarded_index,
)
from torchstrata.inductor.ir.exprs import Constant, IndexValue, Load, Op
from torchstrata.inductor.ir.indexing import Index, Var

F32 = torch.float32


def _load(buffer: str) -> Load:
    return Load(buffer, Index.of(Var("x0", 8)), F32)


def _condition() -> Op:
    position = IndexValue(Index.of(Var("x0", 8)), torch.int64)
    return Op("lt", (position, Constant(4, torch.int64)), torch.bool)


def test_each_branch_guards_the_load_only_it_reads():
    a, b = _load("a"), _load("b")
    where = Op("where", (_condition(), Op("neg", (a,), F32), b), F32)
    guards = branch_guards([Op("mul", (where, Constant(2.0, F32)), F32)])
    assert guards == {a: BranchGuard(_condition(), True), b: BranchGuard(_condition(), False)}


def test_a_load_read_elsewhere_too_is_not_guarded():
    a, b = _load("a"), _load("b")
    where = Op("where", (_condition(), a, b), F32)
    assert branch_guards([Op("add", (where, a), F32)]) == {b: BranchGuard(_condition(), False)}
    # the same load on both sides, or stored directly: no guard either
    assert branch_guards([Op("where", (_condition(), a, a), F32)]) == {}
    assert branch_guards([where, a]) == {b: BranchGuard(_condition(), False)}


def test_a_load_in_the_condition_is_not_guarded():
    a, b, c = _load("a"), _load("b"), _load("c")
    condition = Op("gt", (c, Constant(0.0, F32)), torch.bool)
    guards = branch_guards([Op("where", (condition, a, b), F32)])
    assert c not in guards and set(guards) == {a, b}


def test_nested_wheres_guard_by_the_innermost_branch():
    a, b, c = _load("a"), _load("b"), _load("c")
    inner = Op("where", (_condition(), a, b), F32)
    outer_condition = Op("gt", (c, Constant(0.0, F32)), torch.bool)
    guards = branch_guards([Op("where", (outer_condition, inner, Constant(0.0, F32)), F32)])
    assert guards[a] == BranchGuard(_condition(), True)


def _below(var: Var, bound: int) -> Op:
    return Op(
        "lt", (IndexValue(Index.of(var), torch.int64), Constant(bound, torch.int64)), torch.bool
    )


def test_the_guarded_index_drops_the_wrap_of_a_cat_piece():
    x, row = Var("x3", 128), Var("x2", 16)
    base = Index.of(row) * 128
    first = Load("q", base + Index.of(x).mod(64) + 64, F32)  # -q[i + 64] for i < 64
    second = Load("q", base + (Index.of(x) + 64).mod(64), F32)  # q[i - 64] for i >= 64
    assert guarded_index(first, BranchGuard(_below(x, 64), True)) == base + Index.of(x) + 64
    assert guarded_index(second, BranchGuard(_below(x, 64), False)) == base + Index.of(x) + -64


def test_the_guarded_index_keeps_a_wrap_the_run_does_not_decide():
    x = Var("x3", 96)
    # the middle piece of a three-piece cat under its own (inner) condition only: the
    # run [0, 64) spans two periods of the modulo, so the wrap stays
    middle = Load("q", (Index.of(x) + 32).mod(32), F32)
    assert guarded_index(middle, BranchGuard(_below(x, 64), True)) == middle.index
    # a condition on another variable, or true on two runs, leaves the index alone
    y = Var("x1", 8)
    assert guarded_index(middle, BranchGuard(_below(y, 4), True)) == middle.index
    parity = Op(
        "eq",
        (IndexValue(Index.of(x).mod(2), torch.int64), Constant(0, torch.int64)),
        torch.bool,
    )
    assert guarded_index(middle, BranchGuard(parity, True)) == middle.index


def _rotate_half(dtype: torch.dtype, width: int):
    """x * cos + cat(-x2, x1) * sin over the last dim (RoPE's rotate_half)."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((3, 5, width), dtype))
    cos = b.input("cos", TensorMeta((5, width), dtype))
    half = width // 2
    x1 = b.call(prim("slice"), x, (0, 0, 0), (3, 5, half), (1, 1, 1))
    x2 = b.call(prim("slice"), x, (0, 0, half), (3, 5, width), (1, 1, 1))
    rotated = b.call(prim("cat"), [b.call(prim("neg"), x2), x1], 2)
    wide_cos = b.call(prim("broadcast_in_dim"), cos, (3, 5, width), (1, 2))
    return b.build([b.call(prim("add"), b.call(prim("mul"), x, wide_cos), rotated)])


@pytest.mark.parametrize("width", [8, 6, 2])
@pytest.mark.parametrize("dtype", [F32, torch.bfloat16])
def test_rotate_half_masks_each_piece_and_matches(ind, codegen, dtype, width):
    tolerance = 1e-2 if dtype is torch.bfloat16 else 1e-5
    compiled = ind.check(
        _rotate_half(dtype, width), codegen, seeds=(0, 1), atol=tolerance, rtol=tolerance
    )
    (kernel,) = compiled.kernels
    if codegen != "cpp":
        # both pieces of x are loaded under the cat's condition, one of them negated
        guarded = [
            line for line in kernel.source.splitlines() if "tl.load(buf_x" in line and "& (" in line
        ]
        assert len(guarded) == 2
        assert sum("== 0)" in line for line in guarded) == 1
        # on the lanes they load, the pieces are read without the cat's wrap (contiguous)
        assert not any("%" in line for line in guarded)


@pytest.mark.parametrize("length", [7, 5000])
def test_a_per_row_load_under_a_condition_on_the_reduced_dim(ind, codegen, length):
    """sum_r where(r < 3, bias[row], x[row, r]): the bias is loaded once per row, outside
    the loop over the row, so the condition (per element) cannot mask it."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, length), F32))
    bias = b.input("bias", TensorMeta((4,), F32))
    position = b.call(prim("iota"), length, start=0, step=1, dtype=torch.int64, device="cpu")
    position = b.call(prim("broadcast_in_dim"), position, (4, length), (1,))
    early = b.call(prim("lt"), position, 3)
    wide_bias = b.call(prim("broadcast_in_dim"), bias, (4, length), (0,))
    picked = b.call(prim("where"), early, wide_bias, x)
    total = b.call(prim("sum"), picked, (1,))
    ind.check(b.build([total]), codegen, seeds=(0, 1), atol=1e-3, rtol=1e-4)
