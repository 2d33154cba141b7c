"""Checking guards inside capture: for the segments a program captures after a graph
break, and for callers without the runtime (tests run programs this way).

Sources are evaluated over ``L``, ``S`` (the value stack), ``C`` (cells) and ``G``;
the names of :data:`~torchstrata.core.GUARD_NAMESPACE` (``torch``, the global state
reader) are names there too, as in the runtime's guard functions.

A segment after a graph break is traced under the global torch state of that moment
(user code at the break may change it: enter autocast, set the default dtype), so its
check starts with a global-state guard (:func:`segment_check`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torchstrata.core import (
    GUARD_NAMESPACE,
    FetchedValues,
    Guard,
    global_state_guard,
    guard_cells,
    guard_condition,
)

#: ``check(L, S, C, G)``: the index of the first failing guard, or -1.
GuardCheck = Callable[[Any, Any, Any, Any], int]


def compile_guards(guards: Sequence[Guard]) -> GuardCheck:
    """One generated function checking every guard, in order (the closure cells the
    guards hold bound by their names)."""
    constants: dict[str, Any] = {**GUARD_NAMESPACE, **guard_cells(guards)}

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


def segment_check(guards: Sequence[Guard]) -> GuardCheck:
    """The check of a segment traced just now: the global torch state of now, then
    ``guards``."""
    return compile_guards((global_state_guard(), *guards))


def guard_failure(
    guards: Sequence[Guard], frame: dict[str, Any], globals_: dict[str, Any]
) -> Guard | None:
    """The first of ``guards`` that fails for ``L = frame`` and ``G = globals_``, or None."""
    index = compile_guards(guards)(frame, [], {}, globals_)
    return None if index < 0 else guards[index]
