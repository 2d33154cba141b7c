"""The per-call path of a symbolic entry (decision 0240): its size check looked up inline
in the entry's generated guard function, the lowered graph found by one generated
function, and every change that the remembered answers must not hide still failing the
guard (a layout passing once is no pass for another dtype, stride or tensor type)."""

from __future__ import annotations

import pytest
import torch

import torchstrata.runtime as rt
from torchstrata.core import SizeCheck, describe_guard


def scale_add(x, w):
    return x * w + 1


def _size_check(compiled) -> SizeCheck:
    (entry,) = [e for e in compiled.cache.entries if "symbolic sizes" in str(e.guards.guards)]
    for guard in entry.guards.guards:
        for _, cell in guard.cells:
            if isinstance(cell.cell_contents, SizeCheck):
                return cell.cell_contents
    raise AssertionError("no size check in the symbolic entry")


def _symbolic(codegen: str = "eager"):
    compiled = rt.compile(scale_add, dynamic=True, codegen=codegen)
    w = torch.randn(8)
    for size in (4, 5):
        x = torch.randn(size, 8)
        torch.testing.assert_close(compiled(x, w), scale_add(x, w))
    assert len(compiled.cache) == 1
    return compiled, w


def test_a_known_layout_is_checked_without_calling_the_size_check():
    compiled, w = _symbolic()
    check = _size_check(compiled)
    x = torch.randn(4, 8)
    compiled(x, w)  # the first check of this layout decides it
    calls = []
    decide = check.decide
    check.decide = lambda *t: calls.append(t) or decide(*t)  # type: ignore[method-assign]
    for _ in range(3):
        torch.testing.assert_close(compiled(x, w), scale_add(x, w))
    assert calls == []  # the inline lookup found the layout passing
    x7 = torch.randn(7, 8)
    torch.testing.assert_close(compiled(x7, w), scale_add(x7, w))
    assert len(calls) == 1  # a new size: decided once, then known
    compiled(x7, w)
    assert len(calls) == 1


def test_the_runner_lowers_once_per_size_through_its_generated_call():
    compiled, w = _symbolic("cpp")
    entry = compiled.cache.entries[0]
    call = entry.run.args[0][0]  # functools.partial(program, [runner.call])
    runners = call.__globals__["get"].__self__  # the dict its lookup reads
    assert sorted(runners) == [(4, 8), (5, 8)]  # dynamic=True: every dimension
    for size in (6, 4, 6):
        x = torch.randn(size, 8)
        torch.testing.assert_close(compiled(x, w), scale_add(x, w))
    assert sorted(runners) == [(4, 8), (5, 8), (6, 8)]


class Tagged(torch.Tensor):
    """A tensor subclass (the trace was made for plain tensors)."""


@pytest.mark.parametrize(
    "change",
    ["dtype", "stride", "requires_grad", "subclass", "negative_bit", "size_one"],
)
def test_a_layout_known_to_pass_does_not_pass_a_changed_input(change):
    compiled, w = _symbolic()
    check = _size_check(compiled)
    x = torch.randn(6, 8)
    compiled(x, w)  # this layout is known to pass now
    changed = {
        "dtype": lambda: x.double(),
        "stride": lambda: torch.randn(8, 6).t(),  # same sizes, column-major
        "requires_grad": lambda: x.clone().requires_grad_(),
        "subclass": lambda: x.as_subclass(Tagged),
        "negative_bit": lambda: torch._neg_view(-x),
        "size_one": lambda: torch.randn(1, 8),
    }[change]()
    entry = compiled.cache.entries[0]
    globals_ = compiled._globals
    assert entry.guards.fetch_args((x, w), globals_) is not None
    assert entry.guards.fetch_args((changed, w), globals_) is None
    if change not in ("subclass", "negative_bit"):
        # a new entry for it, results as eager's
        torch.testing.assert_close(compiled(changed, w), scale_add(changed, w))
    assert check.known  # answers remembered, none of them hid the change


def test_the_size_guard_reads_as_the_inputs_it_checks():
    compiled, _ = _symbolic()
    (guard,) = [g for g in compiled.cache.entries[0].guards.guards if g.cells]
    text = describe_guard(guard)
    assert text.startswith("sizes of L['x'], L['w']  # symbolic sizes: ")
    assert "stride()" not in text  # not the layout key it looks up
