"""Counters: an int attribute or global only incremented (``self.calls += 1``,
``global STEP; STEP += 1``), kept out of the guards.

Read as any int, the counter is a constant guarded by value, so every call (a new value)
fails the guard and captures again, until the runtime's recompile limit sends the
function to eager. Where the read is the first instruction of an augmented assignment
of an int constant to the same place (``LOAD_ATTR calls; LOAD_CONST 1; BINARY_OP +=;
SWAP 2; STORE_ATTR calls``, or the ``LOAD_GLOBAL``/``STORE_GLOBAL`` form) the value is a
:class:`CounterVar` instead: the read is guarded by type only, the store is logged as a
side effect and writes ``value + offset`` of the value read at call time (before any
write of the replay), as eager does. A later read of the counter in the same trace
(``if self.calls % 10 == 0``) specialises it: guarded by value as before, unless the
dynamic-shape policy made it symbolic (decision 0386): then the read is its symbol.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import attrs

from torchstrata.capture.tracer import Tracer
from torchstrata.capture.variables import ConstVar, Var
from torchstrata.core import GuardKind

#: ``BINARY_OP`` operators a counter takes, with their sign.
_STEPS = {"+=": 1, "-=": -1}


@attrs.define(eq=False)
class CounterVar(Var):
    """The int at ``base`` (a source; its value at capture time ``observed``) plus
    ``offset``."""

    base: str = ""
    observed: int = 0
    offset: int = 0


def _plain_int(value: Any) -> bool:
    return type(value) is int


def is_increment(
    instructions: Sequence[Any], index: int, name: str, store_opname: str, owner_on_stack: bool
) -> bool:
    """Whether the load at ``index`` starts ``name += <int>`` (or ``-=``) stored back
    by ``store_opname`` (``STORE_ATTR`` after a ``SWAP 2`` when the owner is on the
    stack, ``STORE_GLOBAL`` right after)."""
    tail = instructions[index + 1 : index + 5]
    names = [inst.opname for inst in tail]
    expected = ["LOAD_CONST", "BINARY_OP", "SWAP", store_opname]
    if not owner_on_stack:
        expected = ["LOAD_CONST", "BINARY_OP", store_opname]
    if names[: len(expected)] != expected:
        return False
    constant, binary, store = tail[0], tail[1], tail[len(expected) - 1]
    if owner_on_stack and tail[2].arg != 2:
        return False
    return _plain_int(constant.argval) and binary.argrepr in _STEPS and store.argval == name


def read_counter(tracer: Tracer, base: str, value: Any) -> CounterVar | None:
    """A counter for ``value`` read from ``base``, guarded by type only; None when
    ``value`` is not a plain int."""
    if not _plain_int(value):
        return None
    tracer.guard(GuardKind.TYPE_MATCH, base, int)
    return CounterVar(base=base, observed=value)


def step(counter: CounterVar, symbol: str, amount: Var) -> CounterVar | None:
    """``counter <symbol> amount`` as a counter, or None when it is not a step."""
    sign = _STEPS.get(symbol)
    if sign is None or not isinstance(amount, ConstVar) or not _plain_int(amount.value):
        return None
    return CounterVar(
        base=counter.base, observed=counter.observed, offset=counter.offset + sign * amount.value
    )


def specialise(tracer: Tracer, counter: CounterVar) -> ConstVar:
    """The counter as a value: its symbol plus the offset where the symbolic scope makes
    its base symbolic (decision 0386: ``self.pos += 1`` then ``x[:, self.pos]``);
    otherwise a constant, its value read guarded from now on."""
    symbolic = tracer.symbolic_int(counter.observed, counter.base)
    if symbolic is not None:
        return ConstVar(symbolic.value + counter.offset)
    tracer.guard(GuardKind.CONSTANT_MATCH, counter.base, counter.observed)
    return ConstVar(counter.observed + counter.offset)


def build_counter(counter: CounterVar, read: Any) -> Any:
    """The counter's value at call time, from ``read``, the value at its base now."""
    return operator.add(read, counter.offset)
