"""Checking guards inside capture: for the segments a program captures after a graph
break, and for callers without the runtime (tests run programs this way).

Sources are evaluated over ``L``, ``S`` (the value stack), ``C`` (cells) and ``G``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchstrata.core import Guard, GuardKind, TensorMeta

#: ``check(L, S, C, G)``: the index of the first failing guard, or -1.
GuardCheck = Callable[[Any, Any, Any, Any], int]


def _condition(guard: Guard, var: str, constant: Callable[[Any], str]) -> str:
    kind, expected = guard.kind, guard.expected
    if kind is GuardKind.TENSOR_MATCH and isinstance(expected, TensorMeta):
        return (
            f"isinstance({var}, _Tensor) and {var}.shape == {constant(torch.Size(expected.shape))}"
            f" and {var}.dtype is {constant(expected.dtype)}"
            f" and {var}.stride() == {constant(tuple(expected.strides))}"
            f" and {var}.device == {constant(expected.device)}"
            f" and {var}.requires_grad is {constant(bool(expected.requires_grad))}"
        )
    if kind is GuardKind.TENSOR_MATCH:
        return f"isinstance({var}, _Tensor)"
    if kind is GuardKind.CONSTANT_MATCH:
        if expected is None or isinstance(expected, bool):
            return f"{var} is {constant(expected)}"
        return f"type({var}) is {constant(type(expected))} and {var} == {constant(expected)}"
    if kind is GuardKind.ID_MATCH:
        return f"id({var}) == {constant(expected)}"
    if kind is GuardKind.TYPE_MATCH:
        return f"type({var}) is {constant(expected)}"
    raise ValueError(f"unknown guard kind {kind!r}")


def compile_guards(guards: Sequence[Guard]) -> GuardCheck:
    """One generated function checking every guard, in order."""
    constants: dict[str, Any] = {"_Tensor": torch.Tensor}

    def constant(value: Any) -> str:
        name = f"_c{len(constants)}"
        constants[name] = value
        return name

    lines = ["def check(L, S, C, G):"]
    fetched: dict[str, str] = {}
    for index, guard in enumerate(guards):
        var = fetched.get(guard.source)
        if var is None:
            var = fetched[guard.source] = f"_v{len(fetched)}"
            lines += [
                "    try:",
                f"        {var} = {guard.source}",
                "    except Exception:",
                f"        return {index}",
            ]
        lines += [f"    if not ({_condition(guard, var, constant)}):", f"        return {index}"]
    lines.append("    return -1")
    exec(compile("\n".join(lines) + "\n", "<torchstrata capture guards>", "exec"), constants)
    return constants["check"]


def guard_failure(
    guards: Sequence[Guard], frame: dict[str, Any], globals_: dict[str, Any]
) -> Guard | None:
    """The first of ``guards`` that fails for ``L = frame`` and ``G = globals_``, or None."""
    index = compile_guards(guards)(frame, [], {}, globals_)
    return None if index < 0 else guards[index]
