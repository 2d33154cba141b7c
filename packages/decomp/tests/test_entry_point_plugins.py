"""Rule conflicts between real plugins: installed distributions whose ``torchstrata``
entry points pluggy loads (written to a temporary ``site`` directory on ``sys.path``)."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from torchstrata.core import (
    ENTRY_POINT_GROUP,
    CompileOptions,
    GraphBuilder,
    GraphContract,
    Level,
    TensorMeta,
    aten,
    create_plugin_manager,
    interpret,
    random_inputs,
)
from torchstrata.decomp import DuplicateRuleError, collect_rules

RULE = """
from torchstrata.core import hookimpl
from torchstrata.decomp import override


def hardshrink(ctx, x, lambd=0.5):
    keep = ctx.prim("gt", ctx.prim("abs", x), lambd)
    return ctx.where(keep, x, {fill})


@hookimpl
def torchstrata_decompositions():
    return {{"aten.hardshrink.default": {wrap}(hardshrink)}}
"""


def _install(site: Path, name: str, fill: str, is_override: bool) -> None:
    """Write module ``name`` and a dist-info declaring it under the entry-point group."""
    wrap = "override" if is_override else ""
    (site / f"{name}.py").write_text(textwrap.dedent(RULE.format(fill=fill, wrap=wrap)))
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = {name}\n")


def _manager(*names: str):
    """A manager loading entry points: decomp and ``names`` only (other stages blocked)."""
    installed = {ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert set(names) <= installed
    return create_plugin_manager(blocked=installed - {"decomp", *names})


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    for name in list(sys.modules):
        if name.startswith("ts_plugin_"):
            del sys.modules[name]


def test_two_installed_plugins_for_one_op_conflict(site) -> None:
    _install(site, "ts_plugin_a", "0.0", is_override=False)
    _install(site, "ts_plugin_b", "0.0", is_override=False)
    manager = _manager("ts_plugin_a", "ts_plugin_b")
    with pytest.raises(
        DuplicateRuleError, match=r"ts_plugin_a and ts_plugin_b|ts_plugin_b and ts_plugin_a"
    ):
        collect_rules(manager)


def test_the_installed_override_wins_and_reaches_the_decompose_hook(site) -> None:
    _install(site, "ts_plugin_a", "0.0", is_override=False)
    _install(site, "ts_plugin_b", "-1.0", is_override=True)
    manager = _manager("ts_plugin_a", "ts_plugin_b")
    rule = collect_rules(manager)["aten.hardshrink.default"]
    assert rule.override and rule.source == "ts_plugin_b"
    builder = GraphBuilder(Level.ATEN)
    x = builder.input("x", TensorMeta((3, 4), torch.float32))
    graph = builder.build([builder.call(aten("hardshrink.default"), x)])
    prims = manager.hook.torchstrata_decompose(
        graph=graph, options=CompileOptions(), contract=GraphContract()
    )
    inputs = random_inputs(graph)
    (out,) = interpret(prims, *inputs)
    expected = torch.where(inputs[0].abs() > 0.5, inputs[0], -1.0)  # the override's fill
    torch.testing.assert_close(out, expected)
