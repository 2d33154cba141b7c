"""Side effects on Python state: traced without a graph break, replayed after the graph
(in the order first made, targets keeping their identity), guarded on what was read."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

from torchstrata.capture import capture

COUNT = 0
EVENTS: list = []


class Counting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.calls = 0
        self.last = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = self.fc(x)
        self.last = y
        return y * self.calls


class Box:
    value: torch.Tensor


class Logged:
    def __init__(self) -> None:
        object.__setattr__(self, "log", [])

    def __setattr__(self, name: str, value: object) -> None:
        self.log.append(name)
        object.__setattr__(self, name, value)


def _append_loss(x: torch.Tensor, acc: list) -> torch.Tensor:
    loss = (x * 2).pow(2).mean()
    acc.append(loss)
    return loss


def _write_entry(x: torch.Tensor, d: dict) -> torch.Tensor:
    d["h"] = x.tanh()
    d["n"] = d["n"] + 1
    return d["h"] + d["n"]


def _global_counter(x: torch.Tensor) -> torch.Tensor:
    global COUNT
    COUNT = COUNT + 1
    EVENTS.append("call")
    return x + 1


@pytest.mark.parametrize(
    ("fn", "make"),
    [
        (_append_loss, lambda: (torch.randn(3, 4), [])),
        (_write_entry, lambda: (torch.randn(3, 4), {"n": 0})),
        (_global_counter, lambda: (torch.randn(3, 4),)),
    ],
)
def test_no_graph_break_and_one_graph(fn, make, capture_only):
    result = capture(fn, make(), {})
    assert result.graph_breaks == ()
    assert len(result.graphs) == 1
    runner = capture_only(fn)
    args = make()
    expected_args = copy.deepcopy(args)
    torch.testing.assert_close(runner(*args), fn(*expected_args))
    assert runner.breaks == []
    for actual, expected in zip(args[1:], expected_args[1:]):
        torch.testing.assert_close(actual, expected)


def test_list_keeps_identity_and_aliases_see_items(capture_only):
    acc: list = []
    alias = acc
    runner = capture_only(_append_loss)
    x = torch.randn(3, 4)
    out = runner(x, acc)
    assert alias is acc and len(acc) == 1
    torch.testing.assert_close(acc[0], out)
    runner(x, acc)  # its length changed: the len guard fails, a new capture runs
    assert len(acc) == 2 and runner.captures == 2


def test_returned_container_is_the_argument(capture_only):
    def fill(x: torch.Tensor, out: dict) -> dict:
        out["y"] = x * 2
        return out

    target: dict = {}
    result = capture_only(fill)(torch.ones(2), target)
    assert result is target
    torch.testing.assert_close(target["y"], torch.full((2,), 2.0))


def test_writes_come_after_the_graph_and_reads_see_the_old_value(capture_only):
    def swap(x: torch.Tensor, box: Box) -> tuple[torch.Tensor, torch.Tensor]:
        old = box.value
        box.value = x * 3
        return old + 1, box.value

    box = Box()
    first = torch.randn(2)
    box.value = first
    x = torch.randn(2)
    old, new = capture_only(swap)(x, box)
    torch.testing.assert_close(old, first + 1)
    torch.testing.assert_close(new, x * 3)
    assert box.value is new


def test_module_attributes_and_tensor_attribute_replayed(capture_only):
    model = Counting()
    reference = copy.deepcopy(model)
    runner = capture_only(model)
    for _ in range(2):
        x = torch.randn(2, 4)
        torch.testing.assert_close(runner(x), reference(x))
        assert model.calls == reference.calls
        torch.testing.assert_close(model.last, reference.last)
    assert runner.breaks == []


def test_global_counter_and_log(capture_only):
    global COUNT
    COUNT = 0
    EVENTS.clear()
    runner = capture_only(_global_counter)
    runner(torch.randn(2))
    runner(torch.randn(2))
    assert COUNT == 2 and EVENTS == ["call", "call"]
    assert runner.breaks == []


def test_closure_cell_rebound(capture_only):
    total = 0

    def add(x: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total = total + x.shape[0]
        return x * 2

    runner = capture_only(add)
    runner(torch.randn(3))
    runner(torch.randn(5))
    assert total == 8


def test_read_after_write_in_the_trace_sees_the_write(capture_only):
    def step(x: torch.Tensor, state: dict) -> torch.Tensor:
        state["scale"] = 4.0
        return x * state["scale"]

    state = {"scale": 1.0}
    torch.testing.assert_close(capture_only(step)(torch.ones(2), state), torch.full((2,), 4.0))
    assert state == {"scale": 4.0}


def test_custom_setattr_breaks_instead_of_guessing(capture_only):
    def set_it(x: torch.Tensor, obj: Logged) -> torch.Tensor:
        obj.flag = True
        return x + 1

    obj = Logged()
    runner = capture_only(set_it)
    runner(torch.ones(2), obj)
    assert obj.log == ["flag"] and obj.flag is True
    assert any("__setattr__" in b.reason for b in runner.breaks)


def test_through_runtime_explain_and_fullgraph():
    runtime = pytest.importorskip("torchstrata.runtime")
    acc: list = []
    report = runtime.explain(_append_loss, torch.randn(3, 4), acc)
    assert report.graph_break_count == 0 and report.graph_count == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled = runtime.compile(_append_loss, fullgraph=True, codegen="eager")
        acc = []
        x = torch.randn(3, 4)
        out = compiled(x, acc)
    torch.testing.assert_close(acc[0], out)
    torch.testing.assert_close(out, _append_loss(x, []))


def test_training_losses_collected_in_a_list():
    runtime = pytest.importorskip("torchstrata.runtime")
    model = nn.Linear(4, 2)
    reference = copy.deepcopy(model)

    def step(m: nn.Module, x: torch.Tensor, losses: list) -> torch.Tensor:
        loss = m(x).pow(2).mean()
        losses.append(loss)
        return loss

    compiled = runtime.compile(step, codegen="eager")
    x = torch.randn(3, 4)
    losses: list = []
    expected_losses: list = []
    compiled(model, x, losses).backward()
    step(reference, x, expected_losses).backward()
    assert losses[0] is not None and losses[0].grad_fn is not None
    torch.testing.assert_close(losses, expected_losses)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def _append_to_both(x: torch.Tensor, a: list, b: list) -> torch.Tensor:
    a.append(1)
    return x * len(b)


def test_one_list_through_two_arguments_is_one_variable(capture_only):
    shared: list = []
    runner = capture_only(_append_to_both)
    x = torch.ones(2)
    torch.testing.assert_close(runner(x, shared, shared), x)  # b sees the append
    first, second = [], []
    torch.testing.assert_close(runner(x, first, second), x * 0)  # the alias guard failed
    assert first == [1] and second == [] and runner.captures == 2


def test_alias_guard_through_runtime():
    runtime = pytest.importorskip("torchstrata.runtime")
    compiled = runtime.compile(_append_to_both, codegen="eager")
    shared: list = []
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x, shared, shared), x)
    first: list = []
    torch.testing.assert_close(compiled(x, first, []), x * 0)
    assert first == [1]


class Stepping(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.steps = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        global COUNT
        self.steps += 1  # counters only: no guard on their values
        COUNT += 2
        self.steps -= 3
        self.steps += 4
        return self.fc(x)


def test_counters_do_not_recapture(capture_only):
    global COUNT
    COUNT = 5
    model = Stepping()
    reference = copy.deepcopy(model)
    runner = capture_only(model)
    for _ in range(4):
        x = torch.randn(2, 4)
        torch.testing.assert_close(runner(x), reference(x))
    assert (model.steps, COUNT, runner.captures, runner.breaks) == (8, 21, 1, [])  # both ran
    model.steps = 2.5  # no longer an int: its type guard fails, the new capture adds a float
    runner(torch.randn(2, 4))
    assert model.steps == 4.5 and runner.captures == 2


class SteppingAndReading(Stepping):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps += 1
        if self.steps % 2:  # read after the increment: specialised, guarded by value
            return x * self.steps
        return x


def test_counter_read_after_increment_is_guarded_by_value(capture_only):
    model = SteppingAndReading()
    runner = capture_only(model)
    results = [runner(torch.ones(1)).item() for _ in range(4)]
    assert results == [1.0, 1.0, 3.0, 1.0] and model.steps == 4
    assert runner.captures == 4
