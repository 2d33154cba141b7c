"""The recompile limit and dynamic shapes (decision 0208): the limit counts compiles that
guard failures force, not the entries the shape policy makes; the recompile reasons,
the log and ``explain`` name the size relation that failed and the sizes of the call."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

import torchstrata.runtime as rt


def pointwise(x):
    return torch.sigmoid(x) * x + 1


def branchy(x):
    if x.shape[0] > 20:
        return x[: x.shape[0] // 2] * 2
    return x.sum(0)


def loop_over_columns(x):
    total = x[:, 0]
    for i in range(1, x.size(1)):  # unrolled: one entry per column count
        total = total + x[:, i] * i
    return total


def test_sizes_do_not_use_up_the_limit():
    compiled = rt.compile(pointwise, codegen="eager", options={"recompile_limit": 2})
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        # static, then symbolic, then sizes 1 and 0: entries of the shape policy
        for rows in (16, 17, 5, 1, 0, 33, 2, 64, 9):
            x = torch.randn(rows, 8)
            torch.testing.assert_close(compiled(x), pointwise(x))
        x = torch.randn(7, 8, dtype=torch.float64)  # a guard failure: counted (with the first)
        torch.testing.assert_close(compiled(x), pointwise(x))
    assert len(compiled.cache) == 5
    assert (compiled.cache.recompiles, compiled.cache.policy_entries) == (2, 3)
    failures = compiled.guard_failures((torch.randn(7, 8, dtype=torch.float16),), {})
    # the symbolic entry's size check names what differs
    assert any(
        f.startswith("L['x'].dtype is torch.float16, expected torch.float32") for f in failures
    )
    with pytest.warns(rt.TorchstrataFallbackWarning, match="recompile limit reached"):
        x = torch.randn(7, 8, dtype=torch.float16)  # a third: over the limit, eager
        torch.testing.assert_close(compiled(x), pointwise(x))


def test_distinct_relation_failures_count():
    compiled = rt.compile(loop_over_columns, codegen="eager", options={"recompile_limit": 3})
    with pytest.warns(rt.TorchstrataFallbackWarning, match="recompile limit reached"):
        for cols in (3, 4, 5, 6, 7, 3):
            x = torch.randn(5, cols)
            torch.testing.assert_close(compiled(x), loop_over_columns(x))
    # 3 static, 4 symbolic (the policy), then 5 and 6 fail the relation Eq(cols, 4): two
    # more compiles reach the limit of 3, and 7 runs eagerly
    assert (compiled.cache.recompiles, compiled.cache.policy_entries) == (3, 1)
    assert "dimension 1 of L['x'] becomes symbolic" in compiled.recompile_reasons[0]
    assert "becomes symbolic" not in compiled.recompile_reasons[1]  # said once


def test_the_failed_relation_and_the_sizes_are_named(caplog):
    compiled = rt.compile(branchy, codegen="eager", dynamic=True)
    with caplog.at_level(logging.INFO, logger="torchstrata.runtime"):
        for rows in (8, 9, 30, 31):
            x = torch.randn(rows, 4)
            torch.testing.assert_close(compiled(x), branchy(x))
    reason = "size relation L['x'].size()[0] <= 20 is false for L['x'].size()[0] = 30"
    assert compiled.recompile_reasons == [
        f"{reason} (symbolic sizes: L['x'].size()[0] >= 2, L['x'].size()[1] >= 2; "
        "relations: L['x'].size()[0] <= 20)"
    ]
    assert reason in caplog.text
    report = str(rt.explain(compiled, torch.randn(3, 4)))
    assert f"recompiled: guard failed: {reason}" in report
    assert "sizes 0 and 1" not in report
    report = str(rt.explain(compiled, torch.randn(1, 4)))
    assert "L['x'].size()[0] is 1: sizes 0 and 1 are specialised" in report


def test_after_a_static_entry_the_symbolic_entrys_failure_is_named():
    compiled = rt.compile(branchy, codegen="eager")
    for rows in (8, 9, 30):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(compiled(x), branchy(x))
    # 9 made the dimension symbolic; 30 failed the static entry, then the symbolic one
    assert compiled.recompile_reasons[-1].endswith(
        "; symbolic entry: size relation L['x'].size()[0] <= 20 is false for L['x'].size()[0] = 30"
    )


def test_a_first_size_of_one_then_another_size_is_the_policys_compile():
    # after a first call at 1 (static), the second size makes the dimension symbolic:
    # the policy's entry, as after a first call at 16 (decision 0208), not a recompile
    compiled = rt.compile(pointwise, codegen="eager", options={"recompile_limit": 2})
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for rows in (1, 5, 0, 7, 9):
            x = torch.randn(rows, 8)
            torch.testing.assert_close(compiled(x), pointwise(x))
    assert (compiled.cache.recompiles, compiled.cache.policy_entries) == (1, 2)
    assert compiled.recompile_reasons[0].endswith(
        "(L['x'].size()[0] is 5, was 1: dimension 0 of L['x'] becomes symbolic)"
    )


def test_a_marked_dimension_does_not_become_symbolic_twice():
    compiled = rt.compile(branchy, codegen="eager")
    x = torch.randn(8, 4)
    rt.mark_dynamic(x, 0)
    torch.testing.assert_close(compiled(x), branchy(x))
    x = torch.randn(30, 4)  # not marked: the relation <= 20 fails, a recompile
    torch.testing.assert_close(compiled(x), branchy(x))
    (reason,) = compiled.recompile_reasons
    assert reason.startswith("size relation L['x'].size()[0] <= 20 is false")
    assert "becomes symbolic" not in reason  # it was symbolic from the first call


def add(x, y):
    return x + y


def test_a_failed_equality_of_two_inputs_sizes_names_both():
    # the trace made y's sizes x's (the ShapeEnv replaced one symbol by the other)
    compiled = rt.compile(add, codegen="eager", dynamic=True)
    for rows in (4, 5):
        x, y = torch.randn(rows, 3), torch.randn(rows, 3)
        torch.testing.assert_close(compiled(x, y), x + y)
    (failure,) = compiled.guard_failures((torch.randn(4, 3), torch.randn(5, 3)), {})
    assert failure.startswith(
        "size relation L['x'].size()[0] == L['y'].size()[0] is false for "
        "L['x'].size()[0] = 4, L['y'].size()[0] = 5"
    )
    (failure,) = compiled.guard_failures((torch.randn(4, 3), torch.randn(4, 2)), {})
    assert failure.startswith("size relation L['y'].size()[1] == L['x'].size()[1] is false")


def test_explain_of_a_symbolic_call_lists_the_symbolic_guard():
    compiled = rt.compile(branchy, codegen="eager", dynamic=True)
    report = str(rt.explain(compiled, torch.randn(30, 4)))
    assert "relations: L['x'].size()[0] > 20" in report
    assert "shape == (30, 4)" not in report  # not a static entry's guard
    static = rt.compile(branchy, codegen="eager", dynamic=False)
    assert "shape == (30, 4)" in str(rt.explain(static, torch.randn(30, 4)))
