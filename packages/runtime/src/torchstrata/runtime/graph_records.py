"""Graphs and AOT results as JSON records, for the compiled-graph cache.

A graph is its text form (``str(graph)``, read back by :func:`torchstrata.core.parse`);
an :class:`~torchstrata.core.AotResult` is its graphs' text and its plain fields. A graph
with an argument the text form cannot spell and an AOT result holding tensor constants
are refused with :class:`NotCacheable`; a text that does not parse back to itself is
refused when it is read (:class:`BadRecord`: the entry is rebuilt), so a cache entry never
stands for less than what was compiled. Whether a text reads back is a question about the
text alone, so it is asked where the text is parsed anyway: a compile that writes an entry
formats its graphs once and parses nothing (a 24-layer GPT's graphs took about a second
to parse and format again; a symbolic entry writes entries for every size, most never read).
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
    """``graph``'s text (:func:`read_graph` checks that it reads back as itself)."""
    try:
        return str(graph)
    except TypeError as error:  # an argument the text form cannot spell
        raise NotCacheable(f"the graph has no text form: {error}") from error


def read_graph(text: Any) -> Graph:
    """The graph of a text that :func:`graph_text` wrote, checked to print as that text
    again (an argument or name the parser reads otherwise than it was printed)."""
    if not isinstance(text, str):
        raise BadRecord(f"a graph record must be text, not {type(text).__name__}")
    try:
        graph = parse(text)
    except ValueError as error:
        raise BadRecord(f"a cached graph does not parse: {error}") from error
    if str(graph) != text:
        raise BadRecord("a cached graph does not read back as the same graph")
    return graph


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
