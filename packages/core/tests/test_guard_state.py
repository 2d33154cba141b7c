"""The global-state snapshot: every item it lists changes it, and is named."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from torchstrata.core import (
    GLOBAL_STATE_SOURCE,
    GUARD_NAMESPACE,
    STATE_FIELDS,
    GuardKind,
    describe_state,
    enabled_autocast,
    global_state,
    global_state_guard,
    guard_condition,
    state_changes,
    unsupported_state,
)


class _Mode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


class _DispatchMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _setting(
    set_value: Callable[[Any], Any], get_value: Callable[[], Any], value: Any
) -> Iterator[None]:
    before = get_value()
    set_value(value)
    try:
        yield
    finally:
        set_value(before)


@contextlib.contextmanager
def _default_device(device: str) -> Iterator[None]:
    torch.set_default_device(device)
    try:
        yield
    finally:
        torch.set_default_device(None)


@contextlib.contextmanager
def _deterministic(warn_only: bool) -> Iterator[None]:
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


@contextlib.contextmanager
def _no_deterministic_fill() -> Iterator[None]:
    import torch.utils.deterministic as deterministic

    deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    try:
        yield
    finally:
        deterministic.fill_uninitialized_memory = True  # type: ignore[attr-defined]


#: (the item, a change of it)
CHANGES: list[tuple[str, Callable[[], Any]]] = [
    ("grad mode", torch.no_grad),
    ("inference mode", torch.inference_mode),
    ("autocast", lambda: torch.autocast("cpu", dtype=torch.bfloat16)),
    ("default dtype", lambda: _setting(torch.set_default_dtype, torch.get_default_dtype, torch.float64)),
    ("torch function modes", _Mode),
    ("torch function modes", lambda: _default_device("meta")),
    ("torch dispatch modes", _DispatchMode),
    ("deterministic algorithms", lambda: _deterministic(False)),
    ("deterministic algorithms warn_only", lambda: _deterministic(True)),
    ("deterministic fill of uninitialized memory", _no_deterministic_fill),
    ("number of threads", lambda: _setting(torch.set_num_threads, torch.get_num_threads, 1)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("item", "change"), CHANGES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CHANGES)]
)
def test_each_item_changes_the_snapshot_and_is_named(item, change):
    before = global_state()
    assert global_state() == before
    with change():
        during = global_state()
    assert global_state() == before
    assert during != before
    changes = state_changes(before, during)
    assert any(line.startswith(f"{item} changed from ") for line in changes), changes
    if item == "deterministic algorithms warn_only":
        assert "deterministic algorithms changed from False to True" in changes


def test_the_names_and_a_readable_form():
    snapshot = global_state()
    assert len(snapshot) == len(STATE_FIELDS)
    described = describe_state(snapshot)
    assert described["autocast"] == "off" and described["torch function modes"] == "[]"
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        assert describe_state(global_state())["autocast"] == "cpu torch.bfloat16 (cache off)"


def test_autocast_dtype_and_cache_are_compared_only_while_it_is_on():
    before = global_state()
    torch.set_autocast_dtype("cpu", torch.float16)
    try:
        assert global_state() == before  # autocast off: its dtype changes nothing
        with torch.autocast("cpu"):
            on_fp16 = global_state()
    finally:
        torch.set_autocast_dtype("cpu", torch.bfloat16)
    with torch.autocast("cpu"):
        on_bf16 = global_state()
        with torch.autocast("cpu", cache_enabled=False):
            uncached = global_state()
    assert on_fp16 != on_bf16 != uncached
    assert state_changes(on_bf16, on_fp16) == [
        "autocast changed from cpu torch.bfloat16 to cpu torch.float16"
    ]


def test_a_mode_entered_anew_each_call_gives_the_same_snapshot():
    with _Mode():
        first = global_state()
    with _Mode():
        assert global_state() == first


@contextlib.contextmanager
def _autocast_on_two_device_types() -> Iterator[None]:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.set_autocast_enabled("xpu", True)  # (a flag: no XPU needed)
        try:
            yield
        finally:
            torch.set_autocast_enabled("xpu", False)


def test_what_cannot_be_compiled_is_named():
    assert unsupported_state(global_state()) is None
    with torch.device("cpu"):
        assert unsupported_state(global_state()) is None
    with torch.no_grad(), torch.inference_mode():
        assert unsupported_state(global_state()) is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert unsupported_state(global_state()) is None
        assert enabled_autocast() == (("cpu", torch.bfloat16),)
    assert enabled_autocast() == ()
    cases = [
        (_autocast_on_two_device_types, "autocast is enabled for several device types"),
        (_Mode, r"TorchFunctionMode \(_Mode\)"),
        (_DispatchMode, r"TorchDispatchMode \(_DispatchMode\)"),
        (lambda: _default_device("meta"), "the default device is meta"),
    ]
    for change, reason in cases:
        with change():
            refused = unsupported_state(global_state())
        assert refused is not None
        assert re.search(reason, refused), refused


def test_the_guard_checks_the_snapshot_with_one_comparison():
    guard = global_state_guard()
    assert guard.kind is GuardKind.GLOBAL_STATE and guard.source == GLOBAL_STATE_SOURCE
    constants: dict[str, Any] = dict(GUARD_NAMESPACE)

    def constant(value: Any) -> str:
        constants[f"_c{len(constants)}"] = value
        return f"_c{len(constants) - 1}"

    condition = guard_condition(guard, GLOBAL_STATE_SOURCE, constant)
    check = eval(compile(f"lambda: {condition}", "<test>", "eval"), constants)
    assert check()
    with torch.no_grad():
        assert not check()
