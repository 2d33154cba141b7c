"""Python ``int`` arguments as symbolic sizes (decision 0330).

A symbol is read at call time from a dimension of a graph input (``input_symbol_slots``,
the size check, the size dispatch). An ``int`` argument the dynamic-shapes policy makes
symbolic gets such an input of its own: its *size carrier*, a tensor of shape ``(n,)``
and stride 0 (no storage of its own) read from the source ``int_size_source(L['n'])``.
The graph never reads the carrier's data; its dimension 0 is the symbol that stands for
``n`` wherever the trace used ``n``.

A negative ``int`` has a carrier of its own (decision 0385): shape ``(-n,)``, read from
``int_negative_source(L['n'])``; its dimension 0 is the magnitude ``s`` and the trace
uses ``-s``. A call's value is carried by one of the two carriers by its sign (the other
gives the 0-dim tensor that no carrier's guard accepts), so an int seen at both signs
makes two symbolic entries at most, each guarded on its sign.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterator
from typing import Any

import torch

#: The name, in guard and input sources, of the cell holding :func:`int_size_carrier`
#: (``__cell_`` names are bound from a guard's ``cells``).
INT_SIZE_CELL = "__cell_torchstrata_int_size__"
#: The cell of :func:`int_negative_carrier` (decision 0385).
INT_NEGATIVE_CELL = "__cell_torchstrata_int_negative__"
_CARRIER_SOURCE = re.compile(
    rf"(?:{re.escape(INT_SIZE_CELL)}|{re.escape(INT_NEGATIVE_CELL)})"
    r"\.cell_contents\((?P<source>.+)\)"
)
_NEGATIVE_SOURCE = re.compile(re.escape(INT_NEGATIVE_CELL) + r"\.cell_contents\((?P<source>.+)\)")

_ONE = torch.empty(1, dtype=torch.uint8)
#: What a value that is not a non-negative ``int`` (a bool, a float, -1) carries: a
#: 0-dim tensor, which no carrier's guard accepts.
_NOT_A_SIZE = torch.empty((), dtype=torch.uint8)


def int_size_carrier(value: Any) -> torch.Tensor:
    """The size carrier of ``value``: shape ``(value,)``, stride 0, for an ``int``
    (exactly: not a ``bool``) of 0 or more; a 0-dim tensor for anything else."""
    if type(value) is int and value >= 0:
        return _ONE.as_strided((value,), (0,))
    return _NOT_A_SIZE


def int_negative_carrier(value: Any) -> torch.Tensor:
    """The size carrier of a negative ``int`` ``value``: shape ``(-value,)``, stride 0
    (decision 0385); a 0-dim tensor for anything else (0 and positive ints included)."""
    if type(value) is int and value < 0:
        return _ONE.as_strided((-value,), (0,))
    return _NOT_A_SIZE


def is_int_size_carrier(value: Any) -> bool:
    """Whether ``value`` is a size carrier of :func:`int_size_carrier` for an ``int`` (a
    view of the carriers' one byte, stride 0): a graph input whose data no kernel reads."""
    return (
        isinstance(value, torch.Tensor)
        and value.dim() == 1
        and value.stride() == (0,)
        and value.untyped_storage().data_ptr() == _ONE.untyped_storage().data_ptr()
    )


#: The cell the sources name (guards and input fetches bind ``INT_SIZE_CELL`` to it).
INT_SIZE_CARRIER_CELL = types.CellType(int_size_carrier)


def int_size_source(source: str) -> str:
    """The source of the size carrier of the ``int`` read at ``source`` (``L['n']``)."""
    return f"{INT_SIZE_CELL}.cell_contents({source})"


#: The cell the negative carriers' sources name.
INT_NEGATIVE_CARRIER_CELL = types.CellType(int_negative_carrier)


def int_negative_source(source: str) -> str:
    """The source of the carrier of the negative ``int`` read at ``source``: its size
    is the int's magnitude (decision 0385)."""
    return f"{INT_NEGATIVE_CELL}.cell_contents({source})"


def is_negative_carrier_source(source: str) -> bool:
    """Whether ``source`` reads a negative int's carrier (:func:`int_negative_source`)."""
    return _NEGATIVE_SOURCE.fullmatch(source) is not None


def int_carrier_cells() -> dict[str, types.CellType]:
    """The cells that carrier sources name, to bind where a guard or fetch reads them."""
    return {INT_SIZE_CELL: INT_SIZE_CARRIER_CELL, INT_NEGATIVE_CELL: INT_NEGATIVE_CARRIER_CELL}


def int_argument_source(source: str) -> str | None:
    """``L['n']`` for the source of ``L['n']``'s size carrier (either sign's); None for
    any other."""
    match = _CARRIER_SOURCE.fullmatch(source)
    return match["source"] if match else None


#: How deep and how many items :func:`container_ints` looks into an argument (decision
#: 0365).
MAX_DEPTH = 3
MAX_ITEMS = 64


def container_ints(source: str, value: Any) -> Iterator[tuple[str, int]]:
    """(source, value) of each ``int`` (not a ``bool``) inside the tuple, list or dict
    ``value`` read at ``source``, as capture names them (``L['t'][0]``,
    ``L['cfg']['len']``); at most :data:`MAX_ITEMS`, :data:`MAX_DEPTH` levels deep."""
    found = 0
    pending: list[tuple[str, Any, int]] = [(source, value, 0)]
    while pending and found < MAX_ITEMS:
        where, item, depth = pending.pop(0)
        if type(item) is int and depth:
            found += 1
            yield where, item
            continue
        if depth >= MAX_DEPTH:
            continue
        if type(item) in (tuple, list):
            pending += [(f"{where}[{i}]", v, depth + 1) for i, v in enumerate(item)]
        elif type(item) is dict and all(isinstance(key, str | int) for key in item):
            pending += [(f"{where}[{k!r}]", v, depth + 1) for k, v in item.items()]


def readable_source(text: str) -> str:
    """``text`` with each size carrier's dimension (``<carrier of L['n']>.size()[0]``)
    named by its argument (``L['n']``; a negative int's carrier as ``(-L['n'])``, its
    magnitude)."""
    return _CARRIER_SIZE.sub(_readable, text)


def _readable(match: re.Match[str]) -> str:
    return f"(-{match['source']})" if match["cell"] == INT_NEGATIVE_CELL else match["source"]


#: A carrier's dimension in a source or condition; its int's source (``L['n']``,
#: ``L['cfg']['len']``, ``L['self'].pos``, ``G['n']``) holds no parentheses.
_CARRIER_SIZE = re.compile(
    rf"(?P<cell>{re.escape(INT_SIZE_CELL)}|{re.escape(INT_NEGATIVE_CELL)})"
    r"\.cell_contents\((?P<source>[^()]+)\)\.size\(\)\[0\]"
)
