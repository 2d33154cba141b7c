"""Checking guards inside capture: for the segments a program captures after a graph
break, and for callers without the runtime (tests run programs this way).

Sources are evaluated over ``L``, ``S`` (the value stack), ``C`` (cells) and ``G``;
``torch`` is a name there too, as in the runtime's guard functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchstrata.core import FetchedValues, Guard, guard_condition

#: ``check(L, S, C, G)``: the index of the first failing guard, or -1.
GuardCheck = Callable[[Any, Any, Any, Any], int]


def compile_guards(guards: Sequence[Guard]) -> GuardCheck:
    """One generated function checking every guard, in order."""
    constants: dict[str, Any] = {"torch": torch}

    def constant(value: Any) -> str:
        name = f"_c{len(constants)}"
        constants[name] = value
        return name

    lines = ["def check(L, S, C, G):"]
    fetched = FetchedValues([guard.source for guard in guards])
    for index, guard in enumerate(guards):
        if guard.source not in fetched:
            # reads shared with later sources first, then the source reading them
            for source in [*fetched.reads_before(guard.source), guard.source]:
                new = f"_v{len(fetched.variables)}"
                lines += [
                    "    try:",
                    f"        {new} = {fetched.expression(source)}",
                    "    except Exception:",
                    f"        return {index}",
                ]
                fetched.add(source, new)
        var = fetched.get(guard.source)
        assert var is not None
        lines += [
            f"    if not ({guard_condition(guard, var, constant)}):",
            f"        return {index}",
        ]
    lines.append("    return -1")
    exec(compile("\n".join(lines) + "\n", "<torchstrata capture guards>", "exec"), constants)
    return constants["check"]


def guard_failure(
    guards: Sequence[Guard], frame: dict[str, Any], globals_: dict[str, Any]
) -> Guard | None:
    """The first of ``guards`` that fails for ``L = frame`` and ``G = globals_``, or None."""
    index = compile_guards(guards)(frame, [], {}, globals_)
    return None if index < 0 else guards[index]
