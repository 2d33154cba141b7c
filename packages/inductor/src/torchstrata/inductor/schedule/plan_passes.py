"""Named rewrites of a plan's steps (kernels fused after planning), run like graph passes.

A backend lists the ones it wants in its ``plan_passes()`` (the Triton backend fuses
tails, column partials and small independent kernels, because a launch costs
microseconds on a GPU; the C++ backend none). Each is skipped when its name is in
``CompileOptions.blocked_plugins`` and timed into a :class:`~torchstrata.core.PassRecord`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import ClassVar

import attrs

from torchstrata.core import PassRecord
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.plan import Plan
from torchstrata.inductor.schedule.scheduler import ExternStep

Step = Kernel | ExternStep

#: The ``stage`` of the records of plan passes.
PLAN_STAGE = "inductor.plan"


class PlanPass:
    """A named steps-to-steps rewrite. Subclasses set ``name`` and implement ``__call__``;
    a pass returns new steps and never edits its input."""

    name: ClassVar[str] = ""

    def __call__(self, steps: Sequence[Step]) -> Sequence[Step]:
        raise NotImplementedError


def run_plan_passes(
    plan: Plan, passes: Sequence[PlanPass], blocked: Iterable[str] = ()
) -> tuple[Plan, list[PassRecord]]:
    """``plan`` with each pass not in ``blocked`` applied in order, and their records."""
    blocked = set(blocked)
    steps: Sequence[Step] = plan.steps
    records = []
    for plan_pass in passes:
        if plan_pass.name in blocked:
            continue
        start = time.perf_counter()
        result = plan_pass(steps)
        seconds = time.perf_counter() - start
        records.append(PassRecord(plan_pass.name, PLAN_STAGE, seconds, len(steps), len(result)))
        steps = result
    if not records:
        return plan, records
    return attrs.evolve(plan, steps=tuple(steps)), records
