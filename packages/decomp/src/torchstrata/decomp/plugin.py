"""The decomp stage as a plugin: thin adapters over :func:`decompose`.

``torchstrata_addhooks`` adds decomp's own hookspecs and registers a
:class:`DecompStage` bound to that manager, which decomposes with the table merged
from every plugin's ``torchstrata_decompositions``. If the manager never makes the
historic ``torchstrata_addhooks`` call, the module-level ``torchstrata_decompose``
(``trylast``) still lowers with the built-in rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import pluggy

from torchstrata.core import CompileOptions, Graph, GraphContract, hookimpl
from torchstrata.decomp import hookspecs
from torchstrata.decomp.defaults import DEFAULT_RULES
from torchstrata.decomp.driver import decompose
from torchstrata.decomp.table import Rule, RuleFn, RuleTable, merge_tables

#: Name under which the manager-bound stage object is registered.
STAGE_PLUGIN_NAME = "decomp.stage"


def collect_rules(pluginmanager: pluggy.PluginManager) -> RuleTable:
    """The table merged from every plugin's ``torchstrata_decompositions``.

    Each table is labelled with its plugin's name, so a conflict names both plugins.
    """
    tables = []
    for impl in pluginmanager.hook.torchstrata_decompositions.get_hookimpls():
        table = cast("Mapping[str, RuleFn | Rule] | None", impl.function())
        if table is not None:
            tables.append(RuleTable(table, source=impl.plugin_name))
    return merge_tables(tables)


class DecompStage:
    """``torchstrata_decompose`` for one plugin manager (rules merged lazily, per call)."""

    def __init__(self, pluginmanager: pluggy.PluginManager) -> None:
        self.pluginmanager = pluginmanager

    @hookimpl
    def torchstrata_decompose(
        self, graph: Graph, options: CompileOptions, contract: GraphContract
    ) -> Graph:
        """Lower ``graph`` with every plugin's rules, as ``contract`` asks."""
        rules = collect_rules(self.pluginmanager)
        return decompose(graph, options, rules=rules, contract=contract)


@hookimpl
def torchstrata_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    """Add decomp's hookspecs and the manager-bound stage (idempotent: the historic call
    may reach this plugin more than once)."""
    caller = getattr(pluginmanager.hook, "torchstrata_decompositions", None)
    if caller is None or not caller.has_spec():
        pluginmanager.add_hookspecs(hookspecs)
    if pluginmanager.get_plugin(STAGE_PLUGIN_NAME) is None:
        pluginmanager.register(DecompStage(pluginmanager), name=STAGE_PLUGIN_NAME)


@hookimpl
def torchstrata_decompositions() -> Mapping[str, RuleFn | Rule]:
    """The built-in rules."""
    return DEFAULT_RULES


@hookimpl(trylast=True)
def torchstrata_decompose(graph: Graph, options: CompileOptions, contract: GraphContract) -> Graph:
    """Fallback when decomp's hooks were never added: the built-in rules only."""
    return decompose(graph, options, contract=contract)
