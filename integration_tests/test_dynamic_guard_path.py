"""The per-call path of a symbolic entry (decisions 0240, 0295): its size check looked up
inline in the entry's generated guard function, which also routes a known layout to the
graph lowered for its sizes (no second lookup by size), and every change that the
remembered answers must not hide still failing the guard (a layout passing once is no
pass for another dtype, stride or tensor type)."""

from __future__ import annotations

import pytest
import torch

import torchstrata.runtime as rt
from torchstrata.core import CompileOptions, SizeCheck, describe_guard
from torchstrata.runtime.size_routes import SizeRoutes

from .profiled_calls import python_calls


def scale_add(x, w):
    return x * w + 1


def _size_check(compiled) -> SizeCheck:
    (entry,) = [e for e in compiled.cache.entries if "symbolic sizes" in str(e.guards.guards)]
    for guard in entry.guards.guards:
        for _, cell in guard.cells:
            if isinstance(cell.cell_contents, SizeCheck):
                return cell.cell_contents
    raise AssertionError("no size check in the symbolic entry")


def _symbolic(codegen: str = "eager", native: bool = True):
    options = CompileOptions(native_guards=native)
    compiled = rt.compile(scale_add, dynamic=True, codegen=codegen, options=options)
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
    assert entry.guards.routed  # the check that also picks the runner refuses it
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


def _dispatch_calls(call) -> list[str]:
    """The generated size-dispatch functions (``SizeSpecialisedRunner.call``) that run."""
    return python_calls(call, lambda code: code.co_filename == "<torchstrata size dispatch>")


@pytest.mark.parametrize("native", [True, False])
def test_a_known_layout_goes_from_the_guard_to_the_runner_of_its_sizes(native):
    compiled, w = _symbolic("cpp", native)
    entry = compiled.cache.entries[0]
    assert entry.guards.routed
    routes: SizeRoutes = entry.run_inputs.__self__
    runners = entry.run.args[0][0].__globals__["get"].__self__  # lowered per size
    for size in (6, 4, 6, 5, 4):
        x = torch.randn(size, 8)
        torch.testing.assert_close(compiled(x, w), scale_add(x, w))
    assert len(routes.table) == 3  # one route per layout met through the fast path
    for layout, (runner,) in routes.table.items():
        assert runner is runners[(layout[0][0], 8)]  # the runner of that layout's sizes
    x = torch.randn(5, 8)
    assert _dispatch_calls(lambda: compiled(x, w)) == []  # no second lookup by size
    # the layout routed last is compared before the table is looked up
    (layout,) = [k for k in routes.table if k[0][0] == 5]
    if entry.guards.native_count:  # by the native last layout (decision 0475)
        (last,) = [
            value
            for value in entry.guards.fetch_args.__globals__.values()
            if type(value).__name__ == "LastLayout"
        ]
        assert last(x, w) is routes.table[layout]
    else:
        assert routes.last[0] == (*layout, routes.table[layout])
    x9 = torch.randn(9, 8)
    assert _dispatch_calls(lambda: compiled(x9, w)) == []  # a new size learns its route
    torch.testing.assert_close(compiled(x9, w), scale_add(x9, w))
    assert (9, 8) in runners and len(routes.table) == 4


def test_a_route_is_never_taken_for_a_layout_that_fails():
    compiled, w = _symbolic("cpp")
    entry = compiled.cache.entries[0]
    globals_ = compiled._globals
    routed = entry.guards.fetch_args((torch.randn(4, 8), w), globals_)
    assert routed is not None and len(routed) == 2  # ((graph function,), inputs)
    assert entry.guards.fetch_args((torch.randn(4, 8), torch.randn(7)), globals_) is None
    assert entry.guards.fetch_args((torch.randn(1, 8), w), globals_) is None
    assert entry.guards.fetch_args((torch.randn(4, 8), "w"), globals_) is None
    # and the failure still says why
    failure = entry.guards.failure({"x": torch.randn(4, 8), "w": torch.randn(7)}, globals_)
    assert failure is not None and "L['w']" in str(failure) and "7" in str(failure)


def test_routes_are_refused_where_a_size_is_not_read_by_the_size_check():
    compiled, _ = _symbolic("cpp")
    guards = compiled.cache.entries[0].guards.guards
    (size_guard,) = [g for g in guards if g.cells]
    with pytest.raises(ValueError, match="reads no layout of"):
        SizeRoutes(size_guard, ["L['x']", "L['other']"], [(1, 0)], dict().get, print)
    with pytest.raises(ValueError, match="is not a size guard"):
        SizeRoutes(guards[0], ["L['x']"], [(0, 0)], dict().get, print)


def column_sums(x):
    return x.sum(0) * 2


def test_two_sizes_of_one_value_are_two_names_in_the_guard_text():
    # a square input: both dimensions are 6 when traced, and stay two symbols (sizes are
    # named by symbol, not by value: no dimension printed as the other)
    compiled = rt.compile(column_sums, dynamic=True, codegen="cpp")
    x = torch.randn(6, 6)
    torch.testing.assert_close(compiled(x), column_sums(x))
    (size_guard,) = [g for g in compiled.cache.entries[0].guards.guards if g.cells]
    text = describe_guard(size_guard)
    assert "L['x'].size()[0] >= 2" in text and "L['x'].size()[1] >= 2" in text
    # a failure names the dimension that fails, not the other of the same traced size
    (failure,) = compiled.guard_failures((torch.randn(6, 1),), {})
    assert failure.startswith("L['x'].size()[1] is 1: sizes 0 and 1 are specialised")
    wide = torch.randn(6, 9)  # not square: the same entry (no equality was assumed)
    torch.testing.assert_close(compiled(wide), column_sums(wide))
    assert len(compiled.cache) == 1


def branch_on_rows(x):
    if x.shape[0] > 20:
        return x * 2
    return x - 1


def test_a_routed_entry_still_refuses_a_size_its_relation_excludes():
    compiled = rt.compile(branch_on_rows, dynamic=True, codegen="cpp")
    for rows in (25, 30, 25, 30):
        x = torch.randn(rows, 8)
        torch.testing.assert_close(compiled(x), branch_on_rows(x))
    (entry,) = compiled.cache.entries
    assert entry.guards.routed and len(entry.run_inputs.__self__.table) == 2
    small = torch.randn(10, 8)  # same width and strides per row: only the relation differs
    assert entry.guards.fetch_args((small,), compiled._globals) is None
    failure = entry.guards.failure({"x": small}, compiled._globals)
    assert "size relation L['x'].size()[0] > 20 is false for L['x'].size()[0] = 10" in str(failure)
    torch.testing.assert_close(compiled(small), branch_on_rows(small))  # its own entry
    assert len(compiled.cache) == 2
