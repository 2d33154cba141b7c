"""Closure cells as guard sources, held by the guards that read them.

Guard sources are expressions over ``L`` (arguments by name) and ``G`` (globals), so a
cell that no such expression reaches (a cell of the captured function itself, whose
contents ``L`` holds only by value; a cell of a closure inlined from a value the trace
computed) gets a name of its own, ``__cell_<variable>_<id>__``. The tracer records the
cells it named (:meth:`Tracer.cell_source <torchstrata.capture.tracer.Tracer.cell_source>`)
and every guard whose source reads one holds it (:attr:`torchstrata.core.Guard.cells`):
the check of a compiled entry binds those names, so a cell lives as long as the entries
that guard it, and nothing process-global grows with the functions compiled.
"""

from __future__ import annotations

import types


def cell_name(cell: types.CellType, variable: str) -> str:
    """The name of ``cell`` (of the free variable ``variable``) in guard sources: unique
    among the cells alive, since a guard naming it holds it."""
    return f"__cell_{variable}_{id(cell):x}__"


def cells_read(
    source: str, cells: dict[str, types.CellType]
) -> tuple[tuple[str, types.CellType], ...]:
    """The ``(name, cell)`` pairs of ``cells`` that ``source`` names."""
    if not cells or "__cell_" not in source:
        return ()
    return tuple((name, cell) for name, cell in cells.items() if name in source)
