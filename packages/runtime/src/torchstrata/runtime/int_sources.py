"""Where the dynamic-shape policy finds Python ``int`` values besides the arguments
themselves (decision 0365): the ints inside argument containers (``L['t'][0]``,
``L['cfg']['len']``: ``core.container_ints``), the ints an earlier capture read from module attributes, globals
or closure cells (``L['self'].pos``, ``G['n']``: its ``CONSTANT_MATCH`` guards name
them), and the sources the compile option ``dynamic_sources`` names. The int attributes
of a module whose class is marked static (``mark_static(cls)``, decision 0388) are left
out: they stay constants.

Each is decided as dimension 0 of its size carrier (``core.int_size_source``), with the
rules of an int argument (decision 0330). The sources are spelled as capture spells
them, so a plan's carrier source is the one capture lifts when it reads the value.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from torchstrata.core import GUARD_NAMESPACE, Guard, GuardKind
from torchstrata.runtime.dynamo_marks import dynamo_static_class

#: A source that reads a value: ``L[...]``, ``G[...]`` or a closure cell, then items and
#: attributes (not ``len(...)``, ``tuple(....keys())`` or an alias test).
_VALUE_SOURCE = re.compile(
    r"(?:[LG]\[(?:'[^']*'|\"[^\"]*\"|\d+)\]|__cell_\w+\.cell_contents)"
    r"(?:\[(?:'[^']*'|\"[^\"]*\"|-?\d+)\]|\.[A-Za-z_]\w*)*"
)
#: An argument itself (``L['n']``): the policy reads those from the frame.
_ARGUMENT = re.compile(r"L\[(?:'[^']*'|\"[^\"]*\")\]")


def _read(source: str, namespace: dict[str, Any]) -> Any:
    """The value at ``source`` now, or a sentinel where reading it fails (``namespace``
    is the caller's own fresh dict: ``eval`` may add ``__builtins__`` to it)."""
    try:
        return eval(source, namespace)  # a guard source, read as guards read it
    except Exception:  # noqa: BLE001 - an attribute gone, a key missing: nothing to plan
        return _MISSING


_MISSING = object()


class IntSources:
    """The int sources beyond the arguments that earlier captures read (noted from their
    guards), read again for each plan."""

    def __init__(self) -> None:
        #: source -> (the value the capture saw, the cells its guard reads)
        self.noted: dict[str, tuple[int, dict[str, types.CellType]]] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> IntSources:
        copy = IntSources()
        copy.noted = dict(self.noted)  # the cells are shared, not copied
        return copy

    def note(self, guards: Sequence[Guard]) -> dict[str, int]:
        """Remember the ints a capture specialised on (``CONSTANT_MATCH`` on an ``int``)
        that are not arguments themselves; the ones not noted before, with the value
        the capture saw."""
        new: dict[str, int] = {}
        for guard in guards:
            if guard.kind is not GuardKind.CONSTANT_MATCH or type(guard.expected) is not int:
                continue
            source = guard.source
            if _ARGUMENT.fullmatch(source) or not _VALUE_SOURCE.fullmatch(source):
                continue
            if source not in self.noted:
                self.noted[source] = (guard.expected, dict(guard.cells))
                new[source] = guard.expected
        return new

    def values(
        self, frame: Mapping[str, Any], globals_: Mapping[str, Any], named: Sequence[str] = ()
    ) -> Iterator[tuple[str, int, int | None]]:
        """(source, value now, value the capture saw or None) of each noted source and
        of each ``named`` source (read for ``dynamic_sources``) that holds an ``int``."""
        base = {**GUARD_NAMESPACE, "L": frame, "G": globals_}
        sources = {source: seen for source, (seen, _) in self.noted.items()}
        for source in named:
            if not _ARGUMENT.fullmatch(source) and _VALUE_SOURCE.fullmatch(source):
                sources.setdefault(source, None)  # type: ignore[arg-type]
        for source, seen in sources.items():
            cells = self.noted[source][1] if source in self.noted else {}
            namespace = {**base, **cells}
            value = _read(source, namespace)
            if type(value) is int and not static_attribute(source, namespace):
                yield source, value, seen


#: Set by :func:`torchstrata.runtime.mark_static` on an ``nn.Module`` class (decision
#: 0388): the int attributes of its instances stay constants.
STATIC_CLASS_ATTR = "_torchstrata_static_ints"

_ATTRIBUTE = re.compile(r"(?P<owner>.+)\.[A-Za-z_]\w*")


def static_attribute(source: str, namespace: dict[str, Any]) -> bool:
    """Whether ``source`` reads an attribute of an object whose class is marked static
    (this package's ``mark_static(cls)`` or torch.compile's)."""
    match = _ATTRIBUTE.fullmatch(source)
    if match is None:
        return False
    owner = _read(match["owner"], dict(namespace))
    cls = type(owner)
    return bool(getattr(cls, STATIC_CLASS_ATTR, False)) or dynamo_static_class(cls)


def parse_dynamic_sources(entries: Sequence[str]) -> tuple[tuple[str, int | None], ...]:
    """The compile option ``dynamic_sources`` as (source or regex, dim or None) pairs:
    an entry is a source (``L['n']``, ``L['self'].pos``) or a regex matched with
    ``re.match``, with an optional ``:N`` suffix restricting it to dimension ``N`` of a
    tensor (as ``torch.compiler.config.dynamic_sources``)."""
    parsed = []
    for entry in entries:
        match = re.fullmatch(r"(?P<source>.+?):(?P<dim>\d+)", entry)
        parsed.append((match["source"], int(match["dim"])) if match else (entry, None))
    return tuple(parsed)


def named_dims(
    entries: Sequence[tuple[str, int | None]], source: str, value: Any
) -> set[int] | None:
    """The dimensions of ``value`` (a tensor, or an int as its carrier's one dimension)
    that ``dynamic_sources`` entries name at ``source`` (``source`` itself, or an entry
    as a regex that ``re.match``\\ es it); None where none names it."""
    rank = value.dim() if isinstance(value, torch.Tensor) else 1
    dims: set[int] | None = None
    for entry, dim in entries:
        if entry != source and not _regex_matches(entry, source):
            continue
        dims = dims or set()
        dims |= set(range(rank)) if dim is None else {dim} & set(range(rank))
    return dims


def _regex_matches(pattern: str, source: str) -> bool:
    try:
        return re.match(pattern, source) is not None
    except re.error:
        return False


def exact_sources(entries: Sequence[tuple[str, int | None]]) -> tuple[str, ...]:
    """The entries that are sources capture may read an int from (read at each plan)."""
    return tuple(entry for entry, _ in entries if _VALUE_SOURCE.fullmatch(entry))
