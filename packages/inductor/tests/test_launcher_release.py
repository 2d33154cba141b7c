"""The launcher's release points (``launcher.release_at_last_use``): the names each
statement reads and assigns are recorded as it is generated; the ``del`` lines must be
exactly those that walking the generated source's syntax tree finds (how they were found
before, decision 0300)."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from torchstrata.core import (
    CompileOptions,
    Graph,
    GraphBuilder,
    Level,
    TensorMeta,
    aten,
    parse,
    prim,
)
from torchstrata.inductor.codegen.backend import CppBackend
from torchstrata.inductor.compile import _relaid_outputs, schedule_graph
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.launch import launcher
from torchstrata.inductor.launch.huge_pages import HUGE_PAGE_MIN_BYTES

GOLDEN = Path(__file__).parent / "golden"


def ast_release(lines: Sequence[str], keep: set[str], inputs: Sequence[str] = ()) -> list[str]:
    """The reference: ``del`` of each local after the last statement whose syntax tree
    names it (a read or a store), among the names some statement stores and ``inputs``."""
    lines = "\n".join(lines).split("\n")
    body = ast.parse("def launch():\n" + "\n".join(lines) + "\n    pass\n").body[0]
    assert isinstance(body, ast.FunctionDef)
    statements = body.body[:-1]
    assigned = set(inputs) | {
        node.id
        for stmt in statements
        for node in ast.walk(stmt)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    }
    last_use: dict[str, int] = {}
    for index, stmt in enumerate(statements):
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and node.id in assigned and node.id not in keep:
                last_use[node.id] = index
    dead_after: dict[int, list[str]] = {}
    for name, index in last_use.items():
        # line 1 is the def: statement line numbers are one more than the body's
        dead_after.setdefault((statements[index].end_lineno or 0) - 1, []).append(name)
    out: list[str] = []
    for lineno, line in enumerate(lines, start=1):
        out.append(line)
        if lineno in dead_after:
            out.append(f"    del {', '.join(sorted(dead_after[lineno]))}")
    return out


def _call(handle: str, args: Sequence[str]) -> str:
    return f"{handle}({', '.join(arg + '.data_ptr()' for arg in args)}, 7)"


def _release_calls(
    graph: Graph, write_backs: Mapping[int, int] | None, monkeypatch: Any
) -> list[tuple[list[str], list[str]]]:
    """Generate ``graph``'s launcher; for each release, its lines and those of
    :func:`ast_release` over the same statements."""
    scheduled = schedule_graph(graph, CppBackend(), CompileOptions())
    plan = scheduled.plan
    launches = {
        step.name: launcher.KernelLaunch(step, object(), _call)
        for step in plan.steps
        if isinstance(step, Kernel) and step.rows > 0
    }
    calls: list[tuple[list[str], list[str]]] = []
    release = launcher.release_at_last_use

    def recording(
        statements: Sequence[launcher.Statement], keep: set[str], inputs: Sequence[str] = ()
    ) -> list[str]:
        out = release(statements, keep, inputs)
        lines = [line for statement in statements for line in statement.lines]
        calls.append((out, ast_release(lines, keep, inputs)))
        return out

    monkeypatch.setattr(launcher, "release_at_last_use", recording)
    relaid = _relaid_outputs(scheduled.promised, scheduled.graph.outputs, plan)
    launcher.generate_launcher(scheduled.graph, plan, launches, write_backs, relaid)
    assert len(calls) == 1
    return calls


def _golden(name: str) -> Graph:
    return parse((GOLDEN / f"{name}.prims").read_text())


def _index_copy_update() -> Graph:
    """An input updated by ``index_copy``, written back (runs in place), read after."""
    b = GraphBuilder(Level.PRIMS)
    cache = b.input("cache", TensorMeta((6, 4), torch.float32))
    pos = b.input("pos", TensorMeta((1,), torch.int64))
    row = b.input("row", TensorMeta((1, 4), torch.float32))
    new = b.call(aten("index_copy.default"), cache, 0, pos, b.call(prim("mul"), row, 2.0))
    return b.build([b.call(prim("sum"), new, (0, 1)), new])


def _matmuls() -> Graph:
    """A chain of kernels and matmuls, one of them large enough for huge pages."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((1024, 8), torch.float32))
    w = b.input("w", TensorMeta((8, HUGE_PAGE_MIN_BYTES // 4 // 1024), torch.float32))
    small = b.input("small", TensorMeta((8, 8), torch.float32))
    h = b.call(prim("mul"), b.call(prim("add"), x, 1.0), 0.5)
    big = b.call(aten("mm.default"), h, w)
    g = b.call(prim("exp"), b.call(aten("mm.default"), h, small))
    again = b.call(aten("mm.default"), g, small)
    return b.build([b.call(prim("exp"), big), b.call(prim("mul"), again, 2.0)])


@pytest.mark.parametrize(
    ("graph", "write_backs"),
    [(_index_copy_update, {1: 0}), (_index_copy_update, None), (_matmuls, None)],
    ids=["in place", "functional", "matmuls with huge pages"],
)
def test_extern_launchers_release_where_the_syntax_tree_says(graph, write_backs, monkeypatch):
    [(out, reference)] = _release_calls(graph(), write_backs, monkeypatch)
    assert out == reference
    assert any(line.startswith("    del ") for line in out)


def test_every_golden_launcher_releases_where_the_syntax_tree_says(monkeypatch):
    names = sorted(path.name.removesuffix(".prims") for path in GOLDEN.glob("*.prims"))
    assert len(names) >= 30
    released = 0
    for name in names:
        [(out, reference)] = _release_calls(_golden(name), None, monkeypatch)
        assert out == reference, name
        released += any(line.startswith("    del ") for line in out)
    assert released >= 5


def test_a_name_no_statement_assigns_is_never_released():
    statements = [
        launcher.Statement(("    a = f(x)",), frozenset({"a", "x"}), frozenset({"a"})),
        launcher.Statement(("    k(a, x)",), frozenset({"a", "x"}), frozenset()),
        launcher.Statement(("    b = g(a)",), frozenset({"a", "b"}), frozenset({"b"})),
    ]
    out = launcher.release_at_last_use(statements, keep={"b"})
    assert out == ["    a = f(x)", "    k(a, x)", "    b = g(a)", "    del a"]


def test_an_input_is_released_after_its_last_use_unless_returned():
    statements = [
        launcher.Statement(("    a = f(x)",), frozenset({"a", "x"}), frozenset({"a"})),
        launcher.Statement(("    k(a, y)",), frozenset({"a", "y"}), frozenset()),
        launcher.Statement(("    b = g(a)",), frozenset({"a", "b"}), frozenset({"b"})),
    ]
    out = launcher.release_at_last_use(statements, keep={"b", "y"}, inputs=("x", "y"))
    assert out == ["    a = f(x)", "    del x", "    k(a, y)", "    b = g(a)", "    del a"]
