"""Closure cells as guard sources.

The runtime evaluates guard sources over ``L`` (arguments by name) and ``G`` (globals)
only, so a free variable of the compiled function cannot be named through ``L``. Each
real cell capture reads is registered here and named by a source any evaluator with
builtins can run: ``__import__('torchstrata.capture.closures', fromlist=['_']).CELLS[k]``.
"""

from __future__ import annotations

import types

#: Registered cells by key (their ``id``); they stay alive as long as the process.
CELLS: dict[int, types.CellType] = {}

_PREFIX = "__import__('torchstrata.capture.closures', fromlist=['_']).CELLS"


def cell_source(cell: types.CellType) -> str:
    """A source expression that evaluates to ``cell.cell_contents`` at call time."""
    key = id(cell)
    CELLS.setdefault(key, cell)
    return f"{_PREFIX}[{key}].cell_contents"
