"""The hand-off of an autograd stage that traces a graph with symbolic sizes once for
every size (decision 0220): the symbolic joint graph, the size conditions the trace
relied on, and what makes the :class:`~torchstrata.core.AotResult` of one size."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from torchstrata.core.graph import Graph
from torchstrata.core.results import AotResult
from torchstrata.core.size_conditions import conditions_check


class SizeOutsideTrace(ValueError):
    """The sizes of a call violate a condition a symbolic trace relied on: that trace
    does not describe them (the message names the condition)."""


@attrs.frozen
class SymbolicAot:
    """One trace of a torch-level graph with symbolic sizes, for every size it holds for.

    ``joint`` is the traced ATen graph (forward and, for training, backward), its sizes
    symbolic; ``guards`` the sympy conditions over the graph's symbols that the trace
    decided on (``Eq(Mod(s0, 2), 0)``, ``s0 > 16``...): for sizes that violate one the
    trace is not valid. ``specialise`` makes the ``AotResult`` for one call's sizes
    (symbol name -> int). ``result``, where the stage partitioned the symbolic joint
    graph once (decision 0280), is that ``AotResult`` with its sizes symbolic, for every
    size that meets ``guards``; ``specialise`` then only makes its sizes static. None: the
    stage partitions per size, in ``specialise``.
    """

    joint: Graph
    guards: tuple[Any, ...] = attrs.field(eq=False)
    specialise: Callable[[Mapping[str, int]], AotResult] = attrs.field(eq=False)
    result: AotResult | None = attrs.field(default=None, eq=False)
    #: ``guards`` compiled into Python on first use (decision 0471), else None
    _holds: Callable[[Mapping[str, int]], bool] | None = attrs.field(
        init=False, default=None, eq=False, repr=False
    )

    def violated(self, values: Mapping[str, int]) -> str:
        """The first condition of ``guards`` that ``values`` make false, as text; '' when
        every condition holds."""
        expr = self.violated_condition(values)
        if expr is None:
            return ""
        missing = sorted(s.name for s in expr.free_symbols if s.name not in values)
        return f"{expr} (no value for {', '.join(missing)})" if missing else str(expr)

    def violated_condition(self, values: Mapping[str, int]) -> Any:
        """The first condition of ``guards`` (a sympy expression) that ``values`` make
        false or give no value for; None when every condition holds."""
        import sympy  # type: ignore[import-untyped]

        holds = self._holds
        if holds is None:
            holds = conditions_check(self.guards)
            object.__setattr__(self, "_holds", holds)
        try:
            if holds(values):
                return None  # the common case: a new size the trace holds for, in Python
        except KeyError:
            pass  # a symbol with no value: named below
        for expr in self.guards:
            if any(s.name not in values for s in expr.free_symbols):
                return expr
            free = {s: sympy.Integer(values[s.name]) for s in expr.free_symbols}
            if not bool(expr.xreplace(free)):
                return expr
        return None

    def specialised(self, values: Mapping[str, int]) -> bool:
        """Whether a condition ``values`` violate is an equality (``Eq(s0, 16)``: the
        trace was made for one size there, and a trace at other sizes would be too)."""
        import sympy

        expr = self.violated_condition(values)
        return expr is not None and any(
            isinstance(part, sympy.Eq) for part in sympy.preorder_traversal(expr)
        )

    def at(self, values: Mapping[str, int]) -> AotResult:
        """The ``AotResult`` for sizes ``values``.

        :raises SizeOutsideTrace: if ``values`` violate a condition of ``guards``.
        """
        violated = self.violated(values)
        if violated:
            raise SizeOutsideTrace(
                f"sizes {dict(values)} violate {violated}, which the symbolic trace relied on"
            )
        return self.specialise(values)
