"""Sites of the loop IR and the Triton printer that decided a size's coincidence with 1
(or two offsets equal at one size) decide nothing on a lowering's sizes: what they build
is right at every size, so the lowering serves the sizes where the coincidence holds too
(decision 0480)."""

from __future__ import annotations

import torch

from torchstrata.core import SizeGuards, size_printer
from torchstrata.inductor.codegen.triton.branch_loads import BranchGuard, branch_guards
from torchstrata.inductor.codegen.triton.printer import derive_lines
from torchstrata.inductor.codegen.triton.size_source import TritonSizePrinter
from torchstrata.inductor.ir.exprs import Constant, IndexValue, Load, Op
from torchstrata.inductor.ir.indexing import Index, Var
from torchstrata.inductor.ir.ranges import condition_runs

F32 = torch.float32


def test_a_loop_of_a_symbolic_size_one_here_stays_a_loop():
    guards = SizeGuards({"s0": 3})
    half = guards.symbol("s0") // 2  # 1 at this call, more at others
    with guards.active():
        index = Index.of(Var("r0", half))
    assert index.variables() == {"r0"}
    assert guards.conditions == []


def test_a_symbolic_stride_of_one_here_divides_the_flat_index():
    guards = SizeGuards({"s0": 5})
    third = guards.symbol("s0") // 3  # the last dim's width: 1 at 3 to 5 columns
    with guards.active(), size_printer(TritonSizePrinter()):
        lines = derive_lines([Var("x0", 3), Var("x1", third)], "xindex")
    assert lines[0].startswith("x0 = xindex // ")
    # the row-major stride ``max(width, 1)`` is a range; no equality pins the width
    assert not guards.refused
    assert [str(c) for c in guards.conditions] == ["floor(s0/3) >= 1"]


def test_loads_equal_at_one_size_only_are_each_guarded():
    # a roll's two sides: offsets ``s0 - 2`` and 0 agree at 2 rows only
    guards = SizeGuards({"s0": 2})
    rows = guards.symbol("s0")
    position = IndexValue(Index.of(Var("x0", rows)), torch.int64)
    condition = Op("lt", (position, Constant(1, torch.int64)), torch.bool)
    wrapped = Load("x", Index.of(Var("x0", rows)) + (rows - 2), F32)
    shifted = Load("x", Index.of(Var("x0", rows)), F32)
    with guards.active():
        guards_of = branch_guards([Op("where", (condition, wrapped, shifted), F32)])
    assert guards_of == {
        wrapped: BranchGuard(condition, True),
        shifted: BranchGuard(condition, False),
    }
    assert guards.conditions == [] and not guards.refused


def test_a_run_that_starts_at_the_loops_end_decides_nothing():
    # ``x0 - 1 < 0`` may change where the difference crosses 0 and 1 (``x0`` = 1, 2): at
    # 2 rows the second crossing is the loop's end. Comparing ``2 < s0`` split the
    # lowering at 2; a possibly empty run there is right at every size
    guards = SizeGuards({"s0": 2})
    rows = guards.symbol("s0")
    shifted = IndexValue(Index.of(Var("x0", rows)) + (-1), torch.int64)
    condition = Op("lt", (shifted, Constant(0, torch.int64)), torch.bool)
    with guards.active():
        runs = condition_runs(condition, Var("x0", rows))
    assert runs == [(0, True), (1, False)]
    # only the index value's int64 bound, true at every size it can be
    assert [str(c) for c in guards.conditions] == ["s0 - 2 <= 9223372036854775807"]
    assert not guards.refused
