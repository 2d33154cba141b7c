"""Rule tables: decompositions as data, keyed by ATen overload name.

A rule is a function ``rule(ctx, *args, **kwargs) -> Node | tuple[Node, ...] | None``
that receives the ATen node's arguments (already mapped into the new graph) and builds
prims on ``ctx`` (a :class:`~torchstrata.decomp.DecompContext`). Returning None (or
raising :class:`NotDecomposable`) keeps the ATen node as an extern call.

Tables compose with ``+``. Two rules for one op are an error unless exactly one of them
is marked :func:`override`; then it wins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from torchstrata.core import aten

RuleFn = Callable[..., Any]


class DuplicateRuleError(ValueError):
    """Two rule tables define the same op and neither (or both) is an override."""


class NotDecomposable(Exception):
    """Raised by a rule for arguments it does not handle: the ATen node stays extern."""


@attrs.frozen
class Rule:
    """One decomposition: its function, whether it overrides another, where it came from."""

    fn: RuleFn
    override: bool = False
    source: str = "builtin"

    def __call__(self, ctx: Any, *args: Any, **kwargs: Any) -> Any:
        return self.fn(ctx, *args, **kwargs)


def override(fn: RuleFn | Rule) -> Rule:
    """Mark a rule as replacing the rule another table has for the same op."""
    rule = fn if isinstance(fn, Rule) else Rule(fn)
    return attrs.evolve(rule, override=True)


def overload_name(name: str) -> str:
    """``add.Tensor`` / ``aten.add.Tensor`` / ``aten.relu`` -> ``aten.add.Tensor`` form."""
    return aten(name).name


class RuleTable(Mapping[str, Rule]):
    """An immutable mapping from ATen overload names (``aten.add.Tensor``) to rules.

    >>> table = RuleTable({"add.Tensor": my_add}, source="my_plugin")
    >>> merged = DEFAULT_RULES + table          # DuplicateRuleError unless my_add is override()
    """

    def __init__(
        self, rules: Mapping[str, RuleFn | Rule] | None = None, *, source: str = "builtin"
    ):
        self._rules: dict[str, Rule] = {}
        for name, fn in (rules or {}).items():
            key = overload_name(name)
            if key in self._rules:
                raise DuplicateRuleError(f"{key} is listed twice in one table ({source})")
            rule = fn if isinstance(fn, Rule) else Rule(fn)
            self._rules[key] = (
                attrs.evolve(rule, source=source) if rule.source == "builtin" else rule
            )

    def __getitem__(self, name: str) -> Rule:
        return self._rules[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)

    def __add__(self, other: Mapping[str, RuleFn | Rule]) -> RuleTable:
        other_table = (
            other if isinstance(other, RuleTable) else RuleTable(other, source="anonymous")
        )
        merged = dict(self._rules)
        for name, rule in other_table.items():
            existing = merged.get(name)
            if existing is None or (rule.override and not existing.override):
                merged[name] = rule
            elif existing.override and not rule.override:
                continue
            else:
                raise DuplicateRuleError(
                    f"two rules for {name}: from {existing.source} and {rule.source} "
                    "(mark exactly one with torchstrata.decomp.override)"
                )
        return RuleTable(merged)

    def __repr__(self) -> str:
        return f"RuleTable({len(self)} rules)"


def merge_tables(tables: Sequence[Mapping[str, RuleFn | Rule]]) -> RuleTable:
    """All ``tables`` added together (see :meth:`RuleTable.__add__`)."""
    merged = RuleTable()
    for table in tables:
        merged = merged + table
    return merged
