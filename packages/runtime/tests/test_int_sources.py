"""Where the dynamic-shape policy finds ints beyond the arguments (decision 0365) and
how ``dynamic_sources`` names them (decision 0367)."""

from __future__ import annotations

import types

import pytest
import torch

from torchstrata.core import (
    CompileOptions,
    Guard,
    GuardKind,
    container_ints,
    int_negative_source,
    int_size_source,
)
from torchstrata.runtime.dynamic_shapes import DynamicPolicy, mark_dynamic, mark_static
from torchstrata.runtime.int_sources import IntSources, parse_dynamic_sources


def test_container_ints_are_named_as_capture_names_them():
    found = dict(container_ints("L['cfg']", {"len": 5, "flag": True, "dims": (2, [3]), "r": 0.5}))
    assert found == {"L['cfg']['len']": 5, "L['cfg']['dims'][0]": 2, "L['cfg']['dims'][1][0]": 3}
    assert list(container_ints("L['n']", 7)) == []  # an argument itself: not a container's


def test_noted_sources_are_value_reads_only():
    sources = IntSources()
    sources.note(
        [
            Guard(GuardKind.CONSTANT_MATCH, "L['self'].pos", 4),
            Guard(GuardKind.CONSTANT_MATCH, "G['WINDOW']", 3),
            Guard(GuardKind.CONSTANT_MATCH, "len(L['t'])", 2),  # a length, not a value
            Guard(GuardKind.CONSTANT_MATCH, "L['n']", 2),  # an argument: read from the frame
            Guard(GuardKind.CONSTANT_MATCH, "L['self'].flag", True),  # a bool
        ]
    )
    assert set(sources.noted) == {"L['self'].pos", "G['WINDOW']"}
    frame = {"self": types.SimpleNamespace(pos=9)}
    read = {source: (value, seen) for source, value, seen in sources.values(frame, {})}
    assert read == {"L['self'].pos": (9, 4)}  # G['WINDOW'] is gone: nothing to plan


def test_a_noted_attribute_becomes_symbolic_on_its_second_value():
    policy = DynamicPolicy(None)
    policy.note([Guard(GuardKind.CONSTANT_MATCH, "L['self'].pos", 4)])
    assert policy.plan({"self": types.SimpleNamespace(pos=4)}) == {}
    plan = policy.plan({"self": types.SimpleNamespace(pos=6)})
    assert plan == {int_size_source("L['self'].pos"): (0,)}
    assert "int L['self'].pos becomes symbolic" in policy.reason()


def test_dynamic_sources_mark_ints_and_tensor_dims_from_the_first_call():
    assert parse_dynamic_sources(("L['x']:1", "L\\['n.*")) == (("L['x']", 1), ("L\\['n.*", None))
    policy = DynamicPolicy(
        None, CompileOptions(dynamic_sources="L['x']:1, L\\['n.*").dynamic_sources
    )
    plan = policy.plan({"x": torch.randn(3, 4), "n": 5, "m": 6, "n2": 1})
    assert plan == {"L['x']": (1,), int_size_source("L['n']"): (0,)}
    assert policy.specialised == [(int_size_source("L['n2']"), 0, 1)]  # 0 and 1 stay static
    assert DynamicPolicy(False, ("L['n']",)).plan({"n": 5}) == {}


def test_an_int_takes_no_mark_and_bad_dynamic_sources_are_refused():
    with pytest.raises(TypeError, match="dynamic_sources"):
        mark_dynamic(5, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dynamic_sources"):
        CompileOptions(dynamic_sources=[1])
    assert CompileOptions(dynamic_sources=" L['a'] ,, L['b']").dynamic_sources == (
        "L['a']",
        "L['b']",
    )


def test_a_negative_int_is_planned_as_its_magnitudes_carrier():
    # decision 0385: a carrier per sign; -1 specialised like 1
    policy = DynamicPolicy(None)
    assert policy.plan({"n": -3}) == {}
    assert policy.plan({"n": -5}) == {int_negative_source("L['n']"): (0,)}
    assert "L['n'] is -5, was -3: negative int argument L['n'] becomes symbolic" in policy.reason()
    assert policy.plan({"n": 4}) == {}  # the positive sign starts static on its own
    assert policy.plan({"n": -1}) == {}
    assert policy.specialised == [(int_negative_source("L['n']"), 0, 1)]


def test_note_asks_for_a_second_compile_only_where_the_policy_wants_the_int_symbolic():
    # decision 0387: a dynamic_sources regex learns of an attribute int from the first
    # capture; dynamic=True alone leaves configuration ints static until they change
    guards = [Guard(GuardKind.CONSTANT_MATCH, "L['self'].pos", 4)]
    frame = {"self": types.SimpleNamespace(pos=4)}
    regex = (r"L\['self'\]\..*",)
    assert DynamicPolicy(None, regex).note(guards, frame) is True
    assert DynamicPolicy(True, regex).note(guards, frame) is True
    assert DynamicPolicy(True).note(guards, frame) is False
    assert DynamicPolicy(None).note(guards, frame) is False
    assert DynamicPolicy(False, regex).note(guards, frame) is False
    assert DynamicPolicy(None, (r"G\[.*",)).note(guards, frame) is False  # not named
    policy = DynamicPolicy(None, regex)
    assert policy.note([Guard(GuardKind.CONSTANT_MATCH, "L['self'].pos", 1)], frame) is False
    assert policy.note(guards, frame) is False  # noted already


class _Marked(torch.nn.Module):
    pass


def test_a_module_class_marked_static_keeps_its_int_attributes_out_of_plans():
    # decision 0388
    mark_static(_Marked)
    owner = _Marked()
    owner.pos = 4
    guards = [Guard(GuardKind.CONSTANT_MATCH, "L['self'].pos", 4)]
    policy = DynamicPolicy(True, (r"L\['self'\]\..*",))
    assert policy.note(guards, {"self": owner}) is False
    owner.pos = 6
    assert policy.plan({"self": owner}) == {}
    with pytest.raises(TypeError, match="mark_static"):
        mark_static(5, 0)  # type: ignore[arg-type]


def test_dynamic_true_keeps_a_noted_attribute_static_until_its_second_value():
    # decision 0472: a later compile (a length of 1, specialised) planned ``self.n_heads``
    # symbolic under dynamic=True at the value it always had; argument dims stay symbolic
    policy = DynamicPolicy(True)
    policy.note([Guard(GuardKind.CONSTANT_MATCH, "L['self'].n_heads", 4)])
    frame = {"self": types.SimpleNamespace(n_heads=4), "x": torch.randn(2, 1, 8)}
    assert policy.plan(frame) == {"L['x']": (0, 2)}
    assert policy.specialised == [("L['x']", 1, 1)]
    frame["self"].n_heads = 8
    assert policy.plan(frame) == {"L['x']": (0, 2), int_size_source("L['self'].n_heads"): (0,)}
