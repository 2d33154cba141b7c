"""The plan takes each group's member expressions from the scheduler's joins
(``Group.built``) instead of building them again (decision 0304): the plan must be the
one that building them again gives, kernel for kernel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torchstrata.core import CompileOptions, Graph, parse
from torchstrata.inductor.codegen.backend import CppBackend
from torchstrata.inductor.compile import schedule_graph
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule import plan as plan_module

GOLDEN = Path(__file__).parent / "golden"


def _kernels(graph: Graph) -> tuple[list[Kernel], frozenset[str]]:
    plan = schedule_graph(graph, CppBackend(), CompileOptions()).plan
    kernels = [step for step in plan.steps if isinstance(step, Kernel)]
    return kernels, frozenset(node.name for node in plan.stored)


def test_plans_from_the_joins_expressions_equal_plans_built_again(monkeypatch):
    taken = 0
    original = plan_module._member_exprs

    def counting(group: Any, context: Any) -> Any:
        nonlocal taken
        exprs = original(group, context)
        taken += not context._memo  # nothing was built here
        return exprs

    def built_again(group: Any, context: Any) -> Any:
        return {member: context.member_expr(member) for member in group.members}

    names = sorted(path.name.removesuffix(".prims") for path in GOLDEN.glob("*.prims"))
    assert len(names) >= 30
    for name in names:
        graph = parse((GOLDEN / f"{name}.prims").read_text())
        monkeypatch.setattr(plan_module, "_member_exprs", counting)
        reused = _kernels(graph)
        monkeypatch.setattr(plan_module, "_member_exprs", built_again)
        assert reused == _kernels(graph), name
    assert taken >= 10  # groups joined under their final shapes reuse the joins
