"""Graphs and AOT results as JSON records, for the compiled-graph cache.

A graph is its text form (``str(graph)``, read back by :func:`torchstrata.core.parse`);
an :class:`~torchstrata.core.AotResult` is its graphs' text and its plain fields. Only
what round-trips is written: a graph whose text does not parse back to the same text (an
argument the text form cannot spell) and an AOT result holding tensor constants are
refused with :class:`NotCacheable`, so a cache entry never stands for less than what was
compiled.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from torchstrata.core import AotResult, Graph, parse


class NotCacheable(ValueError):
    """The result cannot be written as plain data (it is compiled, not cached)."""


class BadRecord(ValueError):
    """A cache entry's document is not what this module writes (it is rebuilt)."""


def graph_text(graph: Graph) -> str:
    """``graph``'s text, checked to parse back to itself."""
    text = str(graph)
    try:
        same = str(parse(text)) == text
    except ValueError as error:
        raise NotCacheable(f"the graph's text does not parse: {error}") from error
    if not same:
        raise NotCacheable("the graph's text does not read back as the same graph")
    return text


def read_graph(text: Any) -> Graph:
    """The graph of a text that :func:`graph_text` wrote."""
    if not isinstance(text, str):
        raise BadRecord(f"a graph record must be text, not {type(text).__name__}")
    try:
        return parse(text)
    except ValueError as error:
        raise BadRecord(f"a cached graph does not parse: {error}") from error


#: The AotResult fields that are plain data (ints and nested tuples of ints or None).
_PLAIN_FIELDS = (
    "num_user_outputs",
    "mutated_inputs",
    "num_saved",
    "output_aliases",
    "output_views",
    "num_hidden_outputs",
    "tangent_outputs",
    "grad_inputs",
    "num_unit_grads",
    "offset_inputs",
)


def aot_record(aot: AotResult) -> dict[str, Any]:
    """``aot`` as JSON types (its graphs as text)."""
    if aot.constants:
        raise NotCacheable("the AOT result holds tensor constants")
    record: dict[str, Any] = {name: getattr(aot, name) for name in _PLAIN_FIELDS}
    record["forward"] = graph_text(aot.forward)
    record["backward"] = None if aot.backward is None else graph_text(aot.backward)
    return record


def _tuples(value: Any) -> Any:
    """JSON lists back into the tuples the AotResult fields hold."""
    if isinstance(value, list | tuple):
        return tuple(_tuples(item) for item in value)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise BadRecord(f"unexpected value {value!r} in an AOT record")


def read_aot(record: Any) -> AotResult:
    """The AOT result that :func:`aot_record` wrote as ``record``."""
    if not isinstance(record, Mapping) or set(record) != {*_PLAIN_FIELDS, "forward", "backward"}:
        raise BadRecord("an AOT record has other fields than this version writes")
    fields = {name: _tuples(record[name]) for name in _PLAIN_FIELDS}
    backward = record["backward"]
    try:
        return AotResult(
            forward=read_graph(record["forward"]),
            backward=None if backward is None else read_graph(backward),
            **fields,
        )
    except (TypeError, attrs.exceptions.FrozenInstanceError) as error:
        raise BadRecord(f"an AOT record does not make an AotResult: {error}") from error
