"""Hooks of the decomp stage, added to the manager through ``torchstrata_addhooks``.

A third-party package contributes decompositions by implementing
:func:`torchstrata_decompositions` in a plugin registered under the ``torchstrata``
entry-point group::

    from torchstrata.core import hookimpl
    from torchstrata.decomp import override

    @hookimpl
    def torchstrata_decompositions():
        return {"aten.hardshrink.default": my_hardshrink,
                "aten.gelu.default": override(my_faster_gelu)}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from torchstrata.core import hookspec

if TYPE_CHECKING:
    from torchstrata.decomp.table import Rule, RuleFn


@hookspec
def torchstrata_decompositions() -> Mapping[str, RuleFn | Rule] | None:
    """Contribute decomposition rules, keyed by ATen overload (``"aten.add.Tensor"``).

    :return: a mapping (or :class:`~torchstrata.decomp.RuleTable`) from overload names to
        rules ``rule(ctx, *args, **kwargs) -> Node | tuple[Node, ...] | None``, or None.
        Not firstresult: every plugin's tables are merged; two rules for one op are an
        error (:class:`~torchstrata.decomp.DuplicateRuleError`) unless exactly one is
        marked with :func:`~torchstrata.decomp.override`. The built-in table is
        contributed through this hook by the ``decomp`` plugin itself.
    """
