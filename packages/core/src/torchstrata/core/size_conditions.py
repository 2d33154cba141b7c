"""A lowering's size conditions compiled once into a Python function of the symbols
(issue 33, decision 0471).

A symbolic lowering serves a new size where every condition it recorded holds
(``SizeGuards.conditions``: sympy relations over the symbols). Substituting the size into
each with sympy costs about 0.3 ms a condition, and a split column sum records fifteen
with ``floor`` in them. :func:`conditions_check` prints every condition it can as Python
source, once: sides with :data:`~torchstrata.core.python_source` (``//``, ``%``, ``max``,
``min``: Python's integer operators floor, as sympy's ``floor`` and ``Mod`` do), relations
``Eq``/``Ne``/``Lt``/``Le``/``Gt``/``Ge`` as ``==``/``!=``/``<``/``<=``/``>``/``>=``, and
``And``/``Or``/``Not`` as ``&``/``|``/``not`` of bools. A condition with anything else (a
rational side, a float function) stays a sympy substitution. On integers the printed
condition is exactly sympy's: integer arithmetic on both sides, compared exactly. A zero
divisor (sympy's ``nan``, Python's ``ZeroDivisionError``) makes the check run the sympy
substitution instead, so it answers (or raises) as sympy does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torchstrata.core.size_source import UnprintableSize, python_source


@functools.cache
def _sympy() -> Any:
    import sympy  # type: ignore[import-untyped]

    return sympy


#: sympy relational classes by name, as Python prints them
_RELATIONS = {
    "Equality": "==",
    "Unequality": "!=",
    "StrictLessThan": "<",
    "LessThan": "<=",
    "StrictGreaterThan": ">",
    "GreaterThan": ">=",
}


def condition_source(condition: Any) -> str:
    """Python source of ``condition`` (a sympy boolean over size symbols) over variables
    named as the symbols; raises :class:`~torchstrata.core.UnprintableSize` where a part
    of it has no exact Python form."""
    sympy = _sympy()
    if condition is sympy.true or condition is sympy.false:
        return str(bool(condition))
    name = type(condition).__name__
    if name in _RELATIONS:
        lhs, rhs = python_source(condition.lhs), python_source(condition.rhs)
        return f"({lhs} {_RELATIONS[name]} {rhs})"
    if name in ("And", "Or"):
        # ``&``/``|`` of bools, not ``and``/``or``: every operand is evaluated, as sympy
        # substitutes every one (a zero divisor in a later one raises in both)
        operator = " & " if name == "And" else " | "
        return "(" + operator.join(condition_source(arg) for arg in condition.args) + ")"
    if name == "Not":
        return f"(not {condition_source(condition.args[0])})"
    raise UnprintableSize(f"{condition}: a {name} condition")


def _holds_by_substitution(conditions: Sequence[Any], values: Mapping[str, int]) -> bool:
    """Whether every one of ``conditions`` holds, substituted with sympy (in order)."""
    integer = _sympy().Integer
    for condition in conditions:
        bound = {symbol: integer(values[symbol.name]) for symbol in condition.free_symbols}
        if not bool(condition.xreplace(bound)):
            return False
    return True


def conditions_check(conditions: Sequence[Any]) -> Callable[[Mapping[str, int]], bool]:
    """``check(values)``: whether every one of ``conditions`` holds for the sizes
    ``values`` (``{symbol name: int}``), exactly as their sympy substitution says; one
    generated Python function of the printable conditions (a new size checks them in
    microseconds), then a sympy substitution of the others (module doc)."""
    tests, slow, names = [], [], set()
    for condition in conditions:
        try:
            tests.append(condition_source(condition))
        except UnprintableSize:
            slow.append(condition)
            continue
        names |= {symbol.name for symbol in condition.free_symbols}
    binds = "".join(f"    {name} = values[{name!r}]\n" for name in sorted(names))
    test = " and ".join(tests) or "True"
    source = f"def printed(values):\n{binds}    return {test}\n"
    namespace: dict[str, Any] = {}
    exec(compile(source, "<torchstrata size conditions>", "exec"), namespace)
    printed: Callable[[Mapping[str, int]], bool] = namespace["printed"]
    every = tuple(conditions)

    def check(values: Mapping[str, int]) -> bool:
        try:
            if not printed(values):
                return False
        except ZeroDivisionError:  # sympy's nan: its own answer (or error)
            return _holds_by_substitution(every, values)
        return not slow or _holds_by_substitution(slow, values)

    return check
