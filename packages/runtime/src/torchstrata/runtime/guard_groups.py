"""Guards checked together: a constant list or tuple, and a module's unshadowed members.

**Sequences.** The capture guards a constant sequence piece by piece: its type (``TYPE_MATCH`` on
``S``), its length (``CONSTANT_MATCH`` on ``len(S)``) and each item
(``CONSTANT_MATCH`` on ``S[0]``, ``S[1]``, ...). A convolution's ``stride`` is four
guards; a global list of 100k numbers fed to ``torch.tensor`` is 100k. Checked one by one
they cost Python bytecode per item on every call (about 0.5 us each).

:func:`plan_sequences` finds such groups; the check function then tests each group with
one comparison done in C: ``type(S) is list and len(S) == n and tuple(map(type, S)) ==
types and S == values``. The item types are compared first, so ``==`` only ever runs the
comparisons of plain ``int``, ``bool``, ``str``, ``None`` and ``float`` values, and
``True`` does not pass for ``1``, nor ``1.0`` for ``1``. Floats equal to zero and NaN stay
out of groups: ``==`` does not tell ``-0.0`` from ``0.0``, and NaN equals nothing.

**Members.** Each parameter, buffer or submodule read from a module's member dicts comes
with a guard that the instance dict holds no entry of that name (``ABSENT_KEY`` of
``'weight'`` on ``M.__dict__``; see ``capture/attributes.py``). A module's such guards
become one test, ``'weight' not in D and 'bias' not in D`` over the fetched dict ``D``,
checked where the first of them was.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any

import attrs

from torchstrata.core import Guard, GuardKind

#: Item types whose ``==`` is exact once the types are known to match.
_PLAIN_TYPES = (int, bool, str, type(None))
#: Shorter sequences keep their item guards (a group saves little there).
MIN_ITEMS = 2


@attrs.frozen
class SequenceGroup:
    """The guards on one constant list or tuple, checked together.

    :param first: index of the sequence's ``TYPE_MATCH`` guard (where the group is
        checked, and the index it reports when it fails).
    :param members: indices of every guard of the group, ``first`` included.
    :param source: the sequence's source (what the group's check reads).
    :param container: ``list`` or ``tuple``.
    :param values: the items, in order.
    """

    first: int
    members: tuple[int, ...]
    source: str
    container: type
    values: tuple[Any, ...]

    def snapshot(self) -> Any:
        """The expected sequence, of the guarded type (a list never equals a tuple)."""
        return self.container(self.values)

    def item_types(self) -> tuple[type, ...]:
        """The exact type of each item."""
        return tuple(type(value) for value in self.values)


@attrs.frozen
class MembersGroup:
    """A module's guards that its instance dict shadows none of the members read.

    :param first: index of the first such guard (where the group is checked).
    :param members: indices of every guard of the group.
    :param source: the module's ``__dict__`` (what the group's check reads).
    :param names: the member names that must stay out of it, in the order first read.
    """

    first: int
    members: tuple[int, ...]
    source: str
    names: tuple[str, ...]


GuardGroup = SequenceGroup | MembersGroup


def plan_groups(
    guards: Sequence[Guard], sources: Sequence[str], keep: Collection[str] = ()
) -> dict[int, GuardGroup]:
    """Every group (:func:`plan_sequences`, :func:`plan_members`) by its first index."""
    return {**plan_sequences(guards, sources, keep), **plan_members(guards, sources, keep)}


def plan_members(
    guards: Sequence[Guard], sources: Sequence[str], keep: Collection[str] = ()
) -> dict[int, MembersGroup]:
    """Groups of member-shadowing guards on one module (two or more), by first index."""
    found: dict[str, list[tuple[int, Any]]] = {}
    for index, (guard, source) in enumerate(zip(guards, sources)):
        if guard.kind is GuardKind.ABSENT_KEY and source not in keep:
            found.setdefault(source, []).append((index, guard.expected))
    groups: dict[int, MembersGroup] = {}
    for source, reads in found.items():
        if len(reads) >= MIN_ITEMS:
            indices = tuple(index for index, _ in reads)
            names = tuple(dict.fromkeys(name for _, name in reads))
            groups[indices[0]] = MembersGroup(indices[0], indices, source, names)
    return groups


def _groupable(value: Any) -> bool:
    """Whether ``value``'s guard can join a group (``==`` on it is exact)."""
    if type(value) in _PLAIN_TYPES:
        return True
    return type(value) is float and value != 0.0 and not math.isnan(value)


def plan_sequences(
    guards: Sequence[Guard], sources: Sequence[str], keep: Collection[str] = ()
) -> dict[int, SequenceGroup]:
    """Groups of guards that check one constant list or tuple, by their first index.

    ``sources`` are the guards' sources as the check function reads them (``guards[i]``
    reads ``sources[i]``). A sequence forms a group only when its type guard comes before
    its length and item guards, every item from 0 to its length has exactly one guard,
    a ``CONSTANT_MATCH`` of a groupable value, and no other guard reads the same sources.
    Sources in ``keep`` (values the caller fetches from the check) are never grouped away.
    """
    readers: dict[str, list[int]] = {}
    for index, source in enumerate(sources):
        readers.setdefault(source, []).append(index)
    groups: dict[int, SequenceGroup] = {}
    for index, guard in enumerate(guards):
        if guard.kind is not GuardKind.TYPE_MATCH or guard.expected not in (list, tuple):
            continue
        group = _group(index, guard.expected, guards, sources, readers, keep)
        if group is not None:
            groups[index] = group
    return groups


def _group(
    first: int,
    container: type,
    guards: Sequence[Guard],
    sources: Sequence[str],
    readers: dict[str, list[int]],
    keep: Collection[str],
) -> SequenceGroup | None:
    source = sources[first]
    if readers[source] != [first]:
        return None
    length = _only_constant(f"len({source})", first, guards, readers, keep)
    if length is None or type(guards[length].expected) is not int:
        return None
    count: int = guards[length].expected
    if count < MIN_ITEMS:
        return None
    members = [first, length]
    values = []
    for position in range(count):
        item = _only_constant(f"{source}[{position}]", first, guards, readers, keep)
        if item is None or not _groupable(guards[item].expected):
            return None
        members.append(item)
        values.append(guards[item].expected)
    return SequenceGroup(first, tuple(members), source, container, tuple(values))


def _only_constant(
    source: str,
    after: int,
    guards: Sequence[Guard],
    readers: dict[str, list[int]],
    keep: Collection[str],
) -> int | None:
    """The index of the one guard reading ``source``, when it is a ``CONSTANT_MATCH``
    checked after guard ``after`` and its value is not fetched for the caller."""
    found = readers.get(source, [])
    if len(found) != 1 or source in keep:
        return None
    index = found[0]
    if index <= after or guards[index].kind is not GuardKind.CONSTANT_MATCH:
        return None
    return index
